// The load module: LOADs of INP and WGT tiles, gated by tokens from compute
// (pop_next) and announcing finished loads to compute (push_next).
`default_nettype none
`include "hc_config.vh"

module hc_load (
    input  wire                           clk,
    input  wire                           rst,
    input  wire [127:0]                   cmd,
    input  wire                           cmd_empty,
    output wire                           cmd_pop,
    input  wire                           from_compute_has_token,
    output wire                           from_compute_pop,
    input  wire                           to_compute_has_room,
    output wire                           to_compute_push,
    output reg                            retired,
    // AXI read channels (through the arbiter)
    output wire [31:0]                    ar_addr,
    output wire [7:0]                     ar_len,
    output wire                           ar_valid,
    input  wire                           ar_ready,
    input  wire [`HC_BUS_BITS-1:0]        r_data,
    input  wire                           r_valid,
    output wire                           r_ready,
    // writes into the input and weight buffers
    output wire                           write_inp,
    output wire                           write_wgt,
    output wire [`HC_DMA_SRAM_BASE_W-1:0] write_addr,
    output wire [7:0]                     write_beat,
    output wire [`HC_BUS_BITS-1:0]        write_data
);
    localparam [2:0] BUF_INP = 3'd1;

    reg         active;
    reg         push_next;
    reg [2:0]   buffer;
    wire        dma_done;
    wire        write_valid;

    hc_issue issue_rule (
        .cmd_valid(!cmd_empty), .flags(cmd[`HC_DMA_POP_PREV_LO +: 4]), .idle(!active),
        .prev_has_token(1'b1), .next_has_token(from_compute_has_token),
        .prev_has_room(1'b1), .next_has_room(to_compute_has_room),
        .issue(cmd_pop),
        /* verilator lint_off PINCONNECTEMPTY */
        .pop_prev(),
        /* verilator lint_on PINCONNECTEMPTY */
        .pop_next(from_compute_pop)
    );

    always @(posedge clk) begin
        if (rst) begin
            active <= 1'b0;
            retired <= 1'b0;
        end else begin
            retired <= 1'b0;
            if (cmd_pop) begin
                active <= 1'b1;
                push_next <= cmd[`HC_DMA_PUSH_NEXT_LO];
                buffer <= cmd[`HC_DMA_BUFFER_LO +: 3];
            end
            if (dma_done) begin
                active <= 1'b0;
                retired <= 1'b1;
            end
        end
    end

    hc_dma_read dma (
        .clk(clk), .rst(rst), .start(cmd_pop),
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
        .write_valid(write_valid), .write_addr(write_addr), .write_beat(write_beat),
        .write_data(write_data)
    );

    // tokens go out in the completion cycle, as the timing model has them
    assign to_compute_push = dma_done && push_next;
    assign write_inp = write_valid && buffer == BUF_INP;
    assign write_wgt = write_valid && buffer != BUF_INP;

    // Reserved bits and the fields of other opcodes: fetch routed on the opcode already.
    /* verilator lint_off UNUSEDSIGNAL */
    wire unused_cmd_bits = &{1'b0, cmd};
    /* verilator lint_on UNUSEDSIGNAL */
endmodule

`default_nettype wire
