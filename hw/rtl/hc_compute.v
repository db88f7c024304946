// The compute module: LOADs of micro-ops, accumulator tiles and the ALU's lookup
// table, GEMM, ALU and
// FINISH. GEMM and ALU run their loop nest through a three-stage pipeline, one
// iteration per cycle:
//   S0  advance (outer, inner, micro-op), read the micro-op
//   S1  form the tile indices, read INP/WGT (GEMM) or both ACC operands (ALU)
//   S2  compute and write the accumulator tile
// A GEMM iteration that accumulates into the tile the previous iteration wrote
// takes that value from the write-back register (the RAM read was issued in
// the same cycle as the write). ALU iterations never touch each other's tiles
// (an ISA rule), and the pipeline drains between instructions, so nothing else
// needs forwarding.
`default_nettype none
`include "hc_config.vh"

module hc_compute (
    input  wire                           clk,
    input  wire                           rst,
    input  wire [127:0]                   cmd,
    input  wire                           cmd_empty,
    output wire                           cmd_pop,
    // tokens: prev = load module, next = store module
    input  wire                           from_load_has_token,
    output wire                           from_load_pop,
    input  wire                           from_store_has_token,
    output wire                           from_store_pop,
    input  wire                           to_load_has_room,
    output wire                           to_load_push,
    input  wire                           to_store_has_room,
    output wire                           to_store_push,
    output reg                            retired,
    output reg                            finished,
    // AXI read channels (through the arbiter)
    output wire [31:0]                    ar_addr,
    output wire [7:0]                     ar_len,
    output wire                           ar_valid,
    input  wire                           ar_ready,
    input  wire [`HC_BUS_BITS-1:0]        r_data,
    input  wire                           r_valid,
    output wire                           r_ready,
    // input and weight buffer reads
    output wire                           inp_read_en,
    output wire [`HC_INP_IDX_BITS-1:0]    inp_read_addr,
    input  wire [`HC_INP_TILE_BITS-1:0]   inp_read_data,
    output wire                           wgt_read_en,
    output wire [`HC_WGT_IDX_BITS-1:0]    wgt_read_addr,
    input  wire [`HC_WGT_TILE_BITS-1:0]   wgt_read_data,
    // accumulator buffer: one write port, two read ports (destination, source)
    output wire [`HC_ACC_TILE_BEATS-1:0]  acc_write_en,
    output wire [`HC_ACC_IDX_BITS-1:0]    acc_write_addr,
    output wire [`HC_ACC_TILE_BITS-1:0]   acc_write_data,
    output wire                           acc_dst_read_en,
    output wire [`HC_ACC_IDX_BITS-1:0]    acc_dst_read_addr,
    input  wire [`HC_ACC_TILE_BITS-1:0]   acc_dst_read_data,
    output wire                           acc_src_read_en,
    output wire [`HC_ACC_IDX_BITS-1:0]    acc_src_read_addr,
    input  wire [`HC_ACC_TILE_BITS-1:0]   acc_src_read_data
);
    localparam integer UOP_IDX = `HC_UOP_IDX_BITS;
    localparam integer ACC_IDX = `HC_ACC_IDX_BITS;
    localparam integer SRC_IDX = `HC_UOP_SRC_W;
    localparam integer WGT_IDX = `HC_WGT_IDX_BITS;
    localparam [2:0] OP_LOAD = 3'd0;
    localparam [2:0] OP_GEMM = 3'd2;
    localparam [2:0] OP_ALU = 3'd3;
    localparam [2:0] OP_FINISH = 3'd4;
    localparam [2:0] BUF_UOP = 3'd0;
    localparam [2:0] BUF_LUT = 3'd5;

    // --- issue and completion -----------------------------------------------------
    reg        active;
    reg        push_prev;
    reg        push_next;
    reg        is_finish;
    reg        dma_to_uop;
    reg        dma_to_lut;
    reg        complete_now;
    wire       dma_done;
    wire       loop_done;

    wire [2:0] opcode = cmd[`HC_DMA_OPCODE_LO +: 3];
    wire       cmd_is_loop = opcode == OP_GEMM || opcode == OP_ALU;
    wire       cmd_is_alu = opcode == OP_ALU;

    hc_issue issue_rule (
        .cmd_valid(!cmd_empty), .flags(cmd[`HC_DMA_POP_PREV_LO +: 4]), .idle(!active),
        .prev_has_token(from_load_has_token), .next_has_token(from_store_has_token),
        .prev_has_room(to_load_has_room), .next_has_room(to_store_has_room),
        .issue(cmd_pop), .pop_prev(from_load_pop), .pop_next(from_store_pop)
    );

    wire complete = active && (dma_done || loop_done || complete_now);
    // tokens go out in the completion cycle, as the timing model has them
    assign to_load_push = complete && push_prev;
    assign to_store_push = complete && push_next;

    always @(posedge clk) begin
        if (rst) begin
            active <= 1'b0;
            complete_now <= 1'b0;
            retired <= 1'b0;
            finished <= 1'b0;
        end else begin
            retired <= 1'b0;
            finished <= 1'b0;
            complete_now <= 1'b0;
            if (cmd_pop) begin
                active <= 1'b1;
                push_prev <= cmd[`HC_DMA_PUSH_PREV_LO];
                push_next <= cmd[`HC_DMA_PUSH_NEXT_LO];
                is_finish <= opcode == OP_FINISH;
                dma_to_uop <= cmd[`HC_DMA_BUFFER_LO +: 3] == BUF_UOP;
                dma_to_lut <= cmd[`HC_DMA_BUFFER_LO +: 3] == BUF_LUT;
                // FINISH, unknown opcodes and empty loops do nothing but complete
                complete_now <= opcode != OP_LOAD && !(cmd_is_loop && loop_has_work);
            end
            if (complete) begin
                active <= 1'b0;
                retired <= 1'b1;
                finished <= is_finish;
            end
        end
    end

    // --- LOAD of micro-ops and accumulator tiles ----------------------------------
    wire                           dma_write;
    wire [`HC_DMA_SRAM_BASE_W-1:0] dma_write_addr;
    wire [7:0]                     dma_write_beat;
    wire [`HC_BUS_BITS-1:0]        dma_write_data;

    hc_dma_read dma (
        .clk(clk), .rst(rst), .start(cmd_pop && opcode == OP_LOAD),
        .buffer(cmd[`HC_DMA_BUFFER_LO +: 3]),
        .sram_base(cmd[`HC_DMA_SRAM_BASE_LO +: `HC_DMA_SRAM_BASE_W]),
        .dram_base(cmd[`HC_DMA_DRAM_BASE_LO +: 32]),
        .y_size(cmd[`HC_DMA_Y_SIZE_LO +: 16]),
        .x_size(cmd[`HC_DMA_X_SIZE_LO +: 16]),
        .x_stride(cmd[`HC_DMA_X_STRIDE_LO +: 16]),
        .y_pad_top(cmd[`HC_DMA_Y_PAD_TOP_LO +: 4]),
        .y_pad_bottom(cmd[`HC_DMA_Y_PAD_BOTTOM_LO +: 4]),
        .x_pad_left(cmd[`HC_DMA_X_PAD_LEFT_LO +: 4]),
        .x_pad_right(cmd[`HC_DMA_X_PAD_RIGHT_LO +: 4]),
        .pad_value(cmd[`HC_DMA_PAD_VALUE_LO +: 8]),
        /* verilator lint_off PINCONNECTEMPTY */
        .busy(),
        /* verilator lint_on PINCONNECTEMPTY */
        .done(dma_done),
        .ar_addr(ar_addr), .ar_len(ar_len), .ar_valid(ar_valid),
        .ar_ready(ar_ready), .r_data(r_data), .r_valid(r_valid), .r_ready(r_ready),
        .write_valid(dma_write), .write_addr(dma_write_addr), .write_beat(dma_write_beat),
        .write_data(dma_write_data)
    );

    // --- micro-op buffer ------------------------------------------------------------
    reg                [UOP_IDX:0] uop_index;
    wire               [31:0]      uop_word;
    wire                           loop_read_uop;

    hc_ram #(
        .BANKS(1), .BANK_BITS(32), .DEPTH(`HC_UOP_DEPTH), .ADDR_BITS(UOP_IDX), .READ_PORTS(1)
    ) uop_buffer (
        .clk(clk),
        .write_en(dma_write && dma_to_uop),
        .write_addr(dma_write_addr[UOP_IDX-1:0]),
        .write_data(dma_write_data[31:0]),
        .read_en(loop_read_uop),
        .read_addr(uop_index[UOP_IDX-1:0]),
        .read_data(uop_word)
    );

    // --- lookup table: 64 words of four int8 entries, each written into the ALU
    // lanes' copies (hc_alu_table) ---
    wire lut_write = dma_write && dma_to_lut;

    // --- loop nest (S0) -------------------------------------------------------------
    // GEMM and ALU carry the loop fields at different offsets
    wire [UOP_IDX-1:0] cmd_uop_begin = cmd_is_alu ? cmd[`HC_ALU_UOP_BEGIN_LO +: UOP_IDX]
                                                  : cmd[`HC_GEMM_UOP_BEGIN_LO +: UOP_IDX];
    wire [UOP_IDX:0]   cmd_uop_end = cmd_is_alu ? cmd[`HC_ALU_UOP_END_LO +: UOP_IDX + 1]
                                                : cmd[`HC_GEMM_UOP_END_LO +: UOP_IDX + 1];
    wire [13:0]        cmd_loop_outer = cmd_is_alu ? cmd[`HC_ALU_LOOP_OUTER_LO +: 14]
                                                   : cmd[`HC_GEMM_LOOP_OUTER_LO +: 14];
    wire [13:0]        cmd_loop_inner = cmd_is_alu ? cmd[`HC_ALU_LOOP_INNER_LO +: 14]
                                                   : cmd[`HC_GEMM_LOOP_INNER_LO +: 14];
    wire loop_has_work = cmd_loop_outer != 0 && cmd_loop_inner != 0
                      && cmd_uop_end > {1'b0, cmd_uop_begin};
    wire start_loop = cmd_pop && cmd_is_loop && loop_has_work;

    reg               alu_mode;
    reg               reset_mode;
    reg [2:0]         alu_op;
    reg               use_imm;
    reg               src_inp;
    reg [15:0]        imm;
    reg [UOP_IDX:0]   uop_begin;
    reg [UOP_IDX:0]   uop_last;
    reg [13:0]        outer;
    reg [13:0]        inner;
    reg [13:0]        outer_last;
    reg [13:0]        inner_last;
    reg [ACC_IDX-1:0] dst_factor_outer;
    reg [ACC_IDX-1:0] dst_factor_inner;
    reg [SRC_IDX-1:0] src_factor_outer;
    reg [SRC_IDX-1:0] src_factor_inner;
    reg [WGT_IDX-1:0] wgt_factor_outer;
    reg [WGT_IDX-1:0] wgt_factor_inner;
    reg [ACC_IDX-1:0] dst_outer_base;
    reg [ACC_IDX-1:0] dst_base;
    reg [SRC_IDX-1:0] src_outer_base;
    reg [SRC_IDX-1:0] src_base;
    reg [WGT_IDX-1:0] wgt_outer_base;
    reg [WGT_IDX-1:0] wgt_base;
    reg               looping;

    assign loop_read_uop = looping;

    // S1 and S2 pipeline registers
    reg               s1_valid;
    reg [ACC_IDX-1:0] s1_dst_base;
    reg [SRC_IDX-1:0] s1_src_base;
    reg [WGT_IDX-1:0] s1_wgt_base;
    reg               s2_valid;
    reg [ACC_IDX-1:0] s2_dst;
    reg                         forward_valid;
    reg [ACC_IDX-1:0]           forward_addr;
    reg [`HC_ACC_TILE_BITS-1:0] forward_data;

    reg               loop_started;
    assign loop_done = loop_started && !looping && !s1_valid && !s2_valid;

    always @(posedge clk) begin
        if (rst) begin
            looping <= 1'b0;
            loop_started <= 1'b0;
            s1_valid <= 1'b0;
            s2_valid <= 1'b0;
            forward_valid <= 1'b0;
        end else begin
            if (complete) loop_started <= 1'b0;
            if (start_loop) begin
                loop_started <= 1'b1;
                looping <= 1'b1;
                alu_mode <= cmd_is_alu;
                reset_mode <= !cmd_is_alu && cmd[`HC_GEMM_RESET_LO];
                alu_op <= cmd[`HC_ALU_ALU_OP_LO +: 3];
                use_imm <= cmd[`HC_ALU_USE_IMM_LO];
                src_inp <= cmd_is_alu && cmd[`HC_ALU_SRC_INP_LO];
                imm <= cmd[`HC_ALU_IMM_LO +: 16];
                uop_begin <= {1'b0, cmd_uop_begin};
                uop_last <= cmd_uop_end - 1'b1;
                uop_index <= {1'b0, cmd_uop_begin};
                outer <= 14'd0;
                inner <= 14'd0;
                outer_last <= cmd_loop_outer - 14'd1;
                inner_last <= cmd_loop_inner - 14'd1;
                dst_outer_base <= {ACC_IDX{1'b0}};
                dst_base <= {ACC_IDX{1'b0}};
                src_outer_base <= {SRC_IDX{1'b0}};
                src_base <= {SRC_IDX{1'b0}};
                wgt_outer_base <= {WGT_IDX{1'b0}};
                wgt_base <= {WGT_IDX{1'b0}};
                if (cmd_is_alu) begin
                    dst_factor_outer <= cmd[`HC_ALU_DST_FACTOR_OUTER_LO +: ACC_IDX];
                    dst_factor_inner <= cmd[`HC_ALU_DST_FACTOR_INNER_LO +: ACC_IDX];
                    src_factor_outer <= SRC_IDX'(cmd[`HC_ALU_SRC_FACTOR_OUTER_LO +: ACC_IDX]);
                    src_factor_inner <= SRC_IDX'(cmd[`HC_ALU_SRC_FACTOR_INNER_LO +: ACC_IDX]);
                    wgt_factor_outer <= {WGT_IDX{1'b0}};
                    wgt_factor_inner <= {WGT_IDX{1'b0}};
                end else begin
                    dst_factor_outer <= cmd[`HC_GEMM_ACC_FACTOR_OUTER_LO +: ACC_IDX];
                    dst_factor_inner <= cmd[`HC_GEMM_ACC_FACTOR_INNER_LO +: ACC_IDX];
                    src_factor_outer <= SRC_IDX'(cmd[`HC_GEMM_INP_FACTOR_OUTER_LO +: `HC_INP_IDX_BITS]);
                    src_factor_inner <= SRC_IDX'(cmd[`HC_GEMM_INP_FACTOR_INNER_LO +: `HC_INP_IDX_BITS]);
                    wgt_factor_outer <= cmd[`HC_GEMM_WGT_FACTOR_OUTER_LO +: WGT_IDX];
                    wgt_factor_inner <= cmd[`HC_GEMM_WGT_FACTOR_INNER_LO +: WGT_IDX];
                end
            end

            // S0: one iteration per cycle
            s1_valid <= looping;
            s1_dst_base <= dst_base;
            s1_src_base <= src_base;
            s1_wgt_base <= wgt_base;
            if (looping) begin
                if (uop_index == uop_last) begin
                    uop_index <= uop_begin;
                    if (inner == inner_last) begin
                        inner <= 14'd0;
                        outer <= outer + 14'd1;
                        if (outer == outer_last) looping <= 1'b0;
                        dst_outer_base <= dst_outer_base + dst_factor_outer;
                        src_outer_base <= src_outer_base + src_factor_outer;
                        wgt_outer_base <= wgt_outer_base + wgt_factor_outer;
                        dst_base <= dst_outer_base + dst_factor_outer;
                        src_base <= src_outer_base + src_factor_outer;
                        wgt_base <= wgt_outer_base + wgt_factor_outer;
                    end else begin
                        inner <= inner + 14'd1;
                        dst_base <= dst_base + dst_factor_inner;
                        src_base <= src_base + src_factor_inner;
                        wgt_base <= wgt_base + wgt_factor_inner;
                    end
                end else begin
                    uop_index <= uop_index + 1'b1;
                end
            end

            // S1 -> S2
            s2_valid <= s1_valid;
            s2_dst <= s1_dst;

            // S2 write-back, remembered for the next iteration's forwarding
            forward_valid <= s2_valid;
            forward_addr <= s2_dst;
            forward_data <= loop_result;
        end
    end

    // --- S1: indices and operand reads -------------------------------------------------
    wire [ACC_IDX-1:0] s1_dst = s1_dst_base + uop_word[`HC_UOP_DST_LO +: ACC_IDX];
    wire [SRC_IDX-1:0] s1_src = s1_src_base + uop_word[`HC_UOP_SRC_LO +: SRC_IDX];
    wire [WGT_IDX-1:0] s1_wgt = s1_wgt_base + uop_word[`HC_UOP_WGT_LO +: WGT_IDX];

    // an ALU with src_inp reads its operand from the input buffer instead of ACC
    wire   alu_reads_inp = alu_mode && !use_imm && src_inp;
    assign inp_read_en = s1_valid && (!alu_mode && !reset_mode || alu_reads_inp);
    assign inp_read_addr = s1_src[`HC_INP_IDX_BITS-1:0];
    assign wgt_read_en = s1_valid && !alu_mode && !reset_mode;
    assign wgt_read_addr = s1_wgt;
    assign acc_dst_read_en = s1_valid && !reset_mode;
    assign acc_dst_read_addr = s1_dst;
    assign acc_src_read_en = s1_valid && alu_mode && !use_imm && !src_inp;
    assign acc_src_read_addr = s1_src[ACC_IDX-1:0];

    // --- S2: arithmetic ----------------------------------------------------------------
    wire [`HC_ACC_TILE_BITS-1:0] dot;
    wire [`HC_ACC_TILE_BITS-1:0] alu_result;
    hc_gemm_core gemm_core (.inp(inp_read_data), .wgt(wgt_read_data), .dot(dot));
    // the input tile, each element sign-extended to the accumulator width (elements
    // past the input tile's read as 0; the ISA asks for block_in == block_out)
    wire [`HC_ACC_TILE_BITS-1:0] inp_widened;
    genvar lane;
    generate
        for (lane = 0; lane < `HC_BATCH * `HC_BLOCK_OUT; lane = lane + 1) begin : g_widen
            if (lane < `HC_BATCH * `HC_BLOCK_IN) begin : g_element
                assign inp_widened[lane*`HC_ACC_BITS +: `HC_ACC_BITS] = `HC_ACC_BITS'(
                    $signed(inp_read_data[lane*`HC_INP_BITS +: `HC_INP_BITS]));
            end else begin : g_zero
                assign inp_widened[lane*`HC_ACC_BITS +: `HC_ACC_BITS] = {`HC_ACC_BITS{1'b0}};
            end
        end
    endgenerate
    hc_alu alu (
        .op(alu_op), .use_imm(use_imm), .imm(imm), .clk(clk), .table_write(lut_write),
        .table_word(dma_write_addr[5:0]), .table_data(dma_write_data[31:0]),
        .x_tile(acc_dst_read_data),
        .y_tile(alu_reads_inp ? inp_widened : acc_src_read_data), .result(alu_result)
    );

    wire [`HC_ACC_TILE_BITS-1:0] accumulated =
        forward_valid && forward_addr == s2_dst ? forward_data : acc_dst_read_data;
    reg [`HC_ACC_TILE_BITS-1:0] gemm_result;
    integer element;
    always @* begin
        for (element = 0; element < `HC_BATCH * `HC_BLOCK_OUT; element = element + 1) begin
            gemm_result[element*`HC_ACC_BITS +: `HC_ACC_BITS] =
                accumulated[element*`HC_ACC_BITS +: `HC_ACC_BITS]
                + dot[element*`HC_ACC_BITS +: `HC_ACC_BITS];
        end
    end
    wire [`HC_ACC_TILE_BITS-1:0] loop_result =
        alu_mode ? alu_result : reset_mode ? {`HC_ACC_TILE_BITS{1'b0}} : gemm_result;

    // --- accumulator write port: the loop's write-back, else the DMA's beats --------------
    wire dma_to_acc = dma_write && !dma_to_uop && !dma_to_lut;
    assign acc_write_en = s2_valid ? {`HC_ACC_TILE_BEATS{1'b1}}
                        : dma_to_acc ? `HC_ACC_TILE_BEATS'(1) << dma_write_beat
                        : {`HC_ACC_TILE_BEATS{1'b0}};
    assign acc_write_addr = s2_valid ? s2_dst : dma_write_addr[ACC_IDX-1:0];
    assign acc_write_data = s2_valid ? loop_result : {`HC_ACC_TILE_BEATS{dma_write_data}};

    // Reserved bits and the fields of other opcodes (fetch routed on the opcode already),
    // and micro-op bits above the last field.
    /* verilator lint_off UNUSEDSIGNAL */
    wire unused_cmd_bits = &{1'b0, cmd, uop_word};
    /* verilator lint_on UNUSEDSIGNAL */
endmodule

`default_nettype wire
