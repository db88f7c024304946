// Instruction fetch: reads the stream from DRAM in bursts of up to FETCH_BURST
// instructions and dispatches each, in order, to the command queue of the module
// that executes it (docs/isa.md section 4). A burst is requested only when the
// staging queue can take all of it, so fetch never holds the shared read channel
// while it waits for a full command queue.
`default_nettype none
`include "hc_config.vh"

module hc_fetch #(
    parameter integer FETCH_BURST = 8,
    parameter integer LOG_STAGING_DEPTH = 4
) (
    input  wire                      clk,
    input  wire                      rst,
    input  wire                      start,
    input  wire [31:0]               insn_addr,
    input  wire [31:0]               insn_count,
    // AXI read channels (through the arbiter)
    output wire [31:0]               ar_addr,
    output wire [7:0]                ar_len,
    output wire                      ar_valid,
    input  wire                      ar_ready,
    input  wire [`HC_BUS_BITS-1:0]   r_data,
    input  wire                      r_valid,
    output wire                      r_ready,
    // command queues of the load, compute and store modules
    output wire [127:0]              load_cmd,
    output wire                      load_empty,
    input  wire                      load_pop,
    output wire [127:0]              compute_cmd,
    output wire                      compute_empty,
    input  wire                      compute_pop,
    output wire [127:0]              store_cmd,
    output wire                      store_empty,
    input  wire                      store_pop
);
    localparam integer BUS = `HC_BUS_BITS;
    localparam [2:0] OP_LOAD = 3'd0;
    localparam [2:0] OP_STORE = 3'd1;
    localparam [2:0] BUF_INP = 3'd1;
    localparam [2:0] BUF_WGT = 3'd2;
    localparam [LOG_STAGING_DEPTH:0] STAGING_DEPTH = 1 << LOG_STAGING_DEPTH;

    reg [31:0]  next_addr;
    reg [31:0]  insns_left;
    reg         in_burst;
    reg         addr_valid;
    reg [8:0]   burst_insns;
    reg [8:0]   beats_left;
    reg [127:0] partial;
    reg [7:0]   beat_in_insn;

    wire [LOG_STAGING_DEPTH:0] staged;
    wire [127:0] staged_head;
    wire staging_empty;
    wire dispatch;

    // instructions the next burst fetches: bounded by the stream, FETCH_BURST and 4 KiB
    wire [8:0] to_boundary = 9'(({1'b0, 12'hfff} - {1'b0, next_addr[11:0]} + 13'd1) >> 4);
    wire [8:0] burst_cap = to_boundary < FETCH_BURST[8:0] ? to_boundary : FETCH_BURST[8:0];
    wire [8:0] burst_size = insns_left < {23'd0, burst_cap} ? insns_left[8:0] : burst_cap;
    wire [LOG_STAGING_DEPTH:0] staging_free = STAGING_DEPTH - staged;
    wire can_start_burst = !in_burst && insns_left != 0
                        && {{(9 - LOG_STAGING_DEPTH - 1){1'b0}}, staging_free} >= burst_size;

    wire beat_fire = in_burst && r_valid;
    // beats arrive low half first: shift each one in from the top
    wire [127:0] assembled;
    generate
        if (BUS == 128) begin : g_one_beat
            assign assembled = r_data;
        end else begin : g_beats
            assign assembled = {r_data, partial[127:BUS]};
        end
    endgenerate
    wire insn_complete = beat_fire && beat_in_insn == `HC_INSN_BEATS - 1;

    assign ar_addr = next_addr;
    assign ar_len = 8'(burst_insns * `HC_INSN_BEATS - 1);
    assign ar_valid = addr_valid;
    assign r_ready = in_burst;

    always @(posedge clk) begin
        if (rst) begin
            insns_left <= 32'd0;
            in_burst <= 1'b0;
            addr_valid <= 1'b0;
        end else if (start) begin
            next_addr <= insn_addr;
            insns_left <= insn_count;
            in_burst <= 1'b0;
            addr_valid <= 1'b0;
        end else begin
            if (can_start_burst) begin
                in_burst <= 1'b1;
                addr_valid <= 1'b1;
                burst_insns <= burst_size;
                beats_left <= 9'(burst_size * `HC_INSN_BEATS);
                beat_in_insn <= 8'd0;
            end
            if (addr_valid && ar_ready) addr_valid <= 1'b0;
            if (beat_fire) begin
                partial <= assembled;
                beat_in_insn <= insn_complete ? 8'd0 : beat_in_insn + 8'd1;
                beats_left <= beats_left - 9'd1;
                if (beats_left == 9'd1) begin
                    in_burst <= 1'b0;
                    next_addr <= next_addr + {19'd0, burst_insns, 4'd0};
                    insns_left <= insns_left - {23'd0, burst_insns};
                end
            end
        end
    end

    hc_fifo #(.WIDTH(128), .LOG_DEPTH(LOG_STAGING_DEPTH)) staging (
        .clk(clk), .rst(rst || start),
        .push(insn_complete), .push_data(assembled),
        .pop(dispatch), .head(staged_head), .empty(staging_empty),
        /* verilator lint_off PINCONNECTEMPTY */
        .full(),
        /* verilator lint_on PINCONNECTEMPTY */
        .count(staged)
    );

    // --- dispatch ---------------------------------------------------------------------
    wire [2:0] opcode = staged_head[`HC_DMA_OPCODE_LO +: 3];
    wire [2:0] buffer = staged_head[`HC_DMA_BUFFER_LO +: 3];
    wire to_store = opcode == OP_STORE;
    wire to_load = opcode == OP_LOAD && (buffer == BUF_INP || buffer == BUF_WGT);
    wire to_compute = !to_store && !to_load;
    wire load_full;
    wire compute_full;
    wire store_full;
    assign dispatch = !staging_empty && !(to_load && load_full) && !(to_compute && compute_full)
                 && !(to_store && store_full);

    hc_fifo #(.WIDTH(128), .LOG_DEPTH(`HC_CMD_QUEUE_IDX_BITS)) load_queue (
        .clk(clk), .rst(rst || start),
        .push(dispatch && to_load), .push_data(staged_head),
        .pop(load_pop), .head(load_cmd), .empty(load_empty), .full(load_full),
        /* verilator lint_off PINCONNECTEMPTY */
        .count()
        /* verilator lint_on PINCONNECTEMPTY */
    );
    hc_fifo #(.WIDTH(128), .LOG_DEPTH(`HC_CMD_QUEUE_IDX_BITS)) compute_queue (
        .clk(clk), .rst(rst || start),
        .push(dispatch && to_compute), .push_data(staged_head),
        .pop(compute_pop), .head(compute_cmd), .empty(compute_empty), .full(compute_full),
        /* verilator lint_off PINCONNECTEMPTY */
        .count()
        /* verilator lint_on PINCONNECTEMPTY */
    );
    hc_fifo #(.WIDTH(128), .LOG_DEPTH(`HC_CMD_QUEUE_IDX_BITS)) store_queue (
        .clk(clk), .rst(rst || start),
        .push(dispatch && to_store), .push_data(staged_head),
        .pop(store_pop), .head(store_cmd), .empty(store_empty), .full(store_full),
        /* verilator lint_off PINCONNECTEMPTY */
        .count()
        /* verilator lint_on PINCONNECTEMPTY */
    );

    // the lowest beat of `partial` is shifted out before it is read
    /* verilator lint_off UNUSEDSIGNAL */
    wire unused_partial_bits = &{1'b0, partial};
    /* verilator lint_on UNUSEDSIGNAL */
endmodule

`default_nettype wire
