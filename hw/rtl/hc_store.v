// The store module: STOREs of accumulator tiles to DRAM, full width (ACC) or
// narrowed to out_bits (OUT), gated by tokens from compute (pop_prev) and
// returning them (push_prev). A STORE completes when DRAM has acknowledged every
// burst, so whatever waits on its token sees the data in memory.
`default_nettype none
`include "hc_config.vh"

module hc_store (
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
    // accumulator buffer read port
    output wire                           acc_read_en,
    output wire [`HC_ACC_IDX_BITS-1:0]    acc_read_addr,
    input  wire [`HC_ACC_TILE_BITS-1:0]   acc_read_data,
    // AXI write channels
    output wire [31:0]                    aw_addr,
    output wire [7:0]                     aw_len,
    output wire                           aw_valid,
    input  wire                           aw_ready,
    output wire [`HC_BUS_BITS-1:0]        w_data,
    output wire                           w_last,
    output wire                           w_valid,
    input  wire                           w_ready,
    input  wire                           b_valid,
    output wire                           b_ready
);
    localparam integer AB = `HC_ACC_BITS;
    localparam integer OB = `HC_OUT_BITS;
    localparam integer ELEMENTS = `HC_BATCH * `HC_BLOCK_OUT;
    localparam [2:0] BUF_OUT = 3'd4;

    wire [2:0]  cmd_buffer = cmd[`HC_DMA_BUFFER_LO +: 3];
    wire [31:0] cmd_dram_base = cmd[`HC_DMA_DRAM_BASE_LO +: 32];
    wire [15:0] cmd_y_size = cmd[`HC_DMA_Y_SIZE_LO +: 16];
    wire [15:0] cmd_x_size = cmd[`HC_DMA_X_SIZE_LO +: 16];
    wire [15:0] cmd_x_stride = cmd[`HC_DMA_X_STRIDE_LO +: 16];
    wire        cmd_narrow = cmd_buffer == BUF_OUT;
    wire [3:0]  cmd_log_unit = cmd_narrow ? 4'(`HC_OUT_LOG_UNIT_BYTES)
                                          : 4'(`HC_ACC_LOG_UNIT_BYTES);
    wire [3:0]  cmd_log_beats = cmd_log_unit - 4'(`HC_LOG_BUS_BYTES);

    reg         active;
    reg         push_prev;
    reg         narrow;
    reg [3:0]   log_tile_beats;
    reg [31:0]  tiles_to_read;
    reg [`HC_ACC_IDX_BITS-1:0] read_entry;
    reg         started;

    hc_issue issue_rule (
        .cmd_valid(!cmd_empty), .flags(cmd[`HC_DMA_POP_PREV_LO +: 4]), .idle(!active),
        .prev_has_token(from_compute_has_token), .next_has_token(1'b1),
        .prev_has_room(to_compute_has_room), .next_has_room(1'b1),
        .issue(cmd_pop), .pop_prev(from_compute_pop),
        /* verilator lint_off PINCONNECTEMPTY */
        .pop_next()
        /* verilator lint_on PINCONNECTEMPTY */
    );

    // --- address and burst-boundary sequences (one generator each, same bursts) -----
    wire [8:0]  aw_beats;
    wire [8:0]  w_burst_beats;
    wire        w_bursts_left;
    reg  [8:0]  w_beat_in_burst;
    reg  [15:0] bursts_unacknowledged;
    wire        w_fire = w_valid && w_ready;
    wire [31:0] first_byte = cmd_dram_base << cmd_log_unit;
    wire [31:0] stride_bytes = {16'd0, cmd_x_stride} << cmd_log_unit;

    hc_burst_gen addresses (
        .clk(clk), .rst(rst), .start(cmd_pop), .word_mode(1'b0),
        .log_tile_beats(cmd_log_beats), .first_byte(first_byte), .stride_bytes(stride_bytes),
        .rows(cmd_y_size), .elements(cmd_x_size),
        .valid(aw_valid), .addr(aw_addr), .beats(aw_beats), .accept(aw_ready)
    );
    /* verilator lint_off PINCONNECTEMPTY */
    hc_burst_gen boundaries (
        .clk(clk), .rst(rst), .start(cmd_pop), .word_mode(1'b0),
        .log_tile_beats(cmd_log_beats), .first_byte(first_byte), .stride_bytes(stride_bytes),
        .rows(cmd_y_size), .elements(cmd_x_size),
        .valid(w_bursts_left), .addr(), .beats(w_burst_beats), .accept(w_fire && w_last)
    );
    /* verilator lint_on PINCONNECTEMPTY */

    // tokens go out in the completion cycle, as the timing model has them
    assign to_compute_push = active && transfer_done && push_prev;
    assign aw_len = 8'(aw_beats - 9'd1);
    assign w_last = w_beat_in_burst == w_burst_beats - 9'd1;
    assign b_ready = 1'b1;

    // --- tile reads, narrowing and beat shifting ------------------------------------
    reg                          held_valid;     // the RAM output holds an unsent tile
    reg [`HC_ACC_TILE_BITS-1:0]  shifter;
    reg                          shifter_valid;
    reg [7:0]                    beat;

    wire last_beat_of_tile = beat == (8'd1 << log_tile_beats) - 8'd1;
    wire shifter_frees = w_fire && last_beat_of_tile;
    wire load_shifter = held_valid && (!shifter_valid || shifter_frees);
    assign acc_read_en = tiles_to_read != 0 && (!held_valid || load_shifter);
    assign acc_read_addr = read_entry;
    assign w_valid = shifter_valid;
    assign w_data = shifter[beat*`HC_BUS_BITS +: `HC_BUS_BITS];

    reg [`HC_ACC_TILE_BITS-1:0] narrowed;
    integer element;
    always @* begin
        narrowed = {`HC_ACC_TILE_BITS{1'b0}};
        for (element = 0; element < ELEMENTS; element = element + 1) begin
            narrowed[element*OB +: OB] = acc_read_data[element*AB +: OB];
        end
    end

    wire transfer_done = started && !aw_valid && !w_bursts_left && !shifter_valid
                      && bursts_unacknowledged == 16'd0;

    always @(posedge clk) begin
        if (rst) begin
            active <= 1'b0;
            started <= 1'b0;
            retired <= 1'b0;
            tiles_to_read <= 32'd0;
            held_valid <= 1'b0;
            shifter_valid <= 1'b0;
            bursts_unacknowledged <= 16'd0;
            w_beat_in_burst <= 9'd0;
        end else begin
            retired <= 1'b0;
            started <= active;
            if (cmd_pop) begin
                active <= 1'b1;
                started <= 1'b0;
                push_prev <= cmd[`HC_DMA_PUSH_PREV_LO];
                narrow <= cmd_narrow;
                log_tile_beats <= cmd_log_beats;
                tiles_to_read <= {16'd0, cmd_y_size} * {16'd0, cmd_x_size};
                read_entry <= cmd[`HC_DMA_SRAM_BASE_LO +: `HC_ACC_IDX_BITS];
            end
            if (active && transfer_done) begin
                active <= 1'b0;
                started <= 1'b0;
                retired <= 1'b1;
            end

            if (acc_read_en) begin
                tiles_to_read <= tiles_to_read - 32'd1;
                read_entry <= read_entry + 1'b1;
            end
            held_valid <= acc_read_en || (held_valid && !load_shifter);
            if (load_shifter) begin
                shifter <= narrow ? narrowed : acc_read_data;
                shifter_valid <= 1'b1;
                beat <= 8'd0;
            end else if (shifter_frees) begin
                shifter_valid <= 1'b0;
            end else if (w_fire) begin
                beat <= beat + 8'd1;
            end
            if (w_fire) w_beat_in_burst <= w_last ? 9'd0 : w_beat_in_burst + 9'd1;
            if ((aw_valid && aw_ready) && !b_valid)
                bursts_unacknowledged <= bursts_unacknowledged + 16'd1;
            else if (b_valid && !(aw_valid && aw_ready))
                bursts_unacknowledged <= bursts_unacknowledged - 16'd1;
        end
    end

    // Reserved bits and the fields of other opcodes: fetch routed on the opcode already.
    /* verilator lint_off UNUSEDSIGNAL */
    wire unused_cmd_bits = &{1'b0, cmd};
    /* verilator lint_on UNUSEDSIGNAL */
endmodule

`default_nettype wire
