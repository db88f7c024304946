// The DRAM of the full-system bench: an AXI4 slave memory of 2**LOG_MEM_WORDS bus
// words, loaded and dumped in bulk by the bench: a one-cycle pulse on `load` reads
// words [0, words) from the hex file named by the plusarg +hc_mem_in=FILE
// ($readmemh, one bus word per line, most significant byte first), a pulse on `dump`
// writes them to +hc_mem_out=FILE ($writememh). Accesses at or above `words` words
// answer SLVERR (reads return zero, writes are dropped): the DRAM is exactly the
// image the host placed.
//
// Timing, the parameters of the timing model's bench memory (docs/isa.md section 7),
// set at run time by the bench:
//   - reads: an address is accepted in the cycle it is presented (up to
//     2**LOG_OUTSTANDING bursts queued); the first beat of a burst is valid
//     `read_latency` (>= 1) cycles after its address handshake and not before
//     the previous burst's last beat; then one beat per cycle, in request order.
//   - writes: W beats are taken one per cycle once their burst's address is in;
//     the response follows the last beat after `write_latency` (>= 1) cycles.
//   Reads and writes are independent (a dual-ported memory).
`default_nettype none
`include "hc_config.vh"

module hc_bench_memory #(
    parameter integer LOG_MEM_WORDS = 22,
    parameter integer LOG_OUTSTANDING = 4
) (
    input  wire                      clk,
    input  wire                      rst,
    input  wire                      load,
    input  wire                      dump,
    input  wire [31:0]               words,
    input  wire [7:0]                read_latency,
    input  wire [7:0]                write_latency,
    input  wire [31:0]               awaddr,
    input  wire [7:0]                awlen,
    input  wire                      awvalid,
    output wire                      awready,
    input  wire [`HC_BUS_BITS-1:0]   wdata,
    input  wire [`HC_BUS_BYTES-1:0]  wstrb,
    input  wire                      wlast,
    input  wire                      wvalid,
    output wire                      wready,
    output wire [1:0]                bresp,
    output wire                      bvalid,
    input  wire                      bready,
    input  wire [31:0]               araddr,
    input  wire [7:0]                arlen,
    input  wire                      arvalid,
    output wire                      arready,
    output wire [`HC_BUS_BITS-1:0]   rdata,
    output wire [1:0]                rresp,
    output wire                      rlast,
    output wire                      rvalid,
    input  wire                      rready
);
    localparam integer BUS = `HC_BUS_BITS;
    localparam integer BUS_BYTES = `HC_BUS_BYTES;
    localparam integer LOG_BUS = `HC_LOG_BUS_BYTES;
    localparam integer QUEUE = 1 << LOG_OUTSTANDING;

    // --- storage, bulk load and dump -------------------------------------------------
    reg [BUS-1:0] mem [0:(1 << LOG_MEM_WORDS) - 1];
    reg [8*1024-1:0] in_file;
    reg [8*1024-1:0] out_file;
    initial begin
        if (!$value$plusargs("hc_mem_in=%s", in_file)) in_file = "hc_mem_in.hex";
        if (!$value$plusargs("hc_mem_out=%s", out_file)) out_file = "hc_mem_out.hex";
    end
    always @(posedge clk) begin
        if (load && words != 0) $readmemh(in_file, mem, 0, words - 1);
        if (dump && words != 0) $writememh(out_file, mem, 0, words - 1);
    end

    function in_range(input [31:0] byte_address);
        in_range = (byte_address >> LOG_BUS) < words
                && (byte_address >> LOG_BUS) < (32'd1 << LOG_MEM_WORDS);
    endfunction

    reg [31:0] now;
    always @(posedge clk) now <= rst ? 32'd0 : now + 32'd1;

    // --- read channels ----------------------------------------------------------------
    reg [31:0]            ar_addr_q [0:QUEUE-1];
    reg [7:0]             ar_len_q [0:QUEUE-1];
    reg [31:0]            ar_due_q [0:QUEUE-1];
    reg [LOG_OUTSTANDING:0] ar_head;
    reg [LOG_OUTSTANDING:0] ar_tail;
    wire ar_empty = ar_head == ar_tail;
    wire [LOG_OUTSTANDING:0] ar_count = ar_tail - ar_head;
    assign arready = !ar_count[LOG_OUTSTANDING];

    reg        r_active;
    reg [31:0] r_addr;
    reg [7:0]  r_left;
    wire       r_ok = in_range(r_addr);
    wire       r_beat = r_active && rready;
    wire       r_free = !r_active || (r_beat && r_left == 8'd0);
    wire [LOG_OUTSTANDING-1:0] ar_head_slot = ar_head[LOG_OUTSTANDING-1:0];
    wire       r_next = r_free && !ar_empty && ar_due_q[ar_head_slot] <= now;

    assign rvalid = r_active;
    assign rdata = r_ok ? mem[r_addr[LOG_BUS +: LOG_MEM_WORDS]] : {BUS{1'b0}};
    assign rresp = r_ok ? 2'b00 : 2'b10;
    assign rlast = r_left == 8'd0;

    always @(posedge clk) begin
        if (rst) begin
            ar_head <= 0;
            ar_tail <= 0;
            r_active <= 1'b0;
        end else begin
            if (arvalid && arready) begin
                ar_addr_q[ar_tail[LOG_OUTSTANDING-1:0]] <= araddr;
                ar_len_q[ar_tail[LOG_OUTSTANDING-1:0]] <= arlen;
                ar_due_q[ar_tail[LOG_OUTSTANDING-1:0]] <= now + {24'd0, read_latency};
                ar_tail <= ar_tail + 1'b1;
            end
            if (r_beat) begin
                r_addr <= r_addr + BUS_BYTES;
                r_left <= r_left - 8'd1;
            end
            if (r_next) begin
                r_active <= 1'b1;
                r_addr <= ar_addr_q[ar_head_slot];
                r_left <= ar_len_q[ar_head_slot];
                ar_head <= ar_head + 1'b1;
            end else if (r_free) begin
                r_active <= 1'b0;
            end
        end
    end

    // --- write channels ---------------------------------------------------------------
    reg [31:0]            aw_addr_q [0:QUEUE-1];
    reg [LOG_OUTSTANDING:0] aw_head;
    reg [LOG_OUTSTANDING:0] aw_tail;
    wire [LOG_OUTSTANDING:0] aw_count = aw_tail - aw_head;
    assign awready = !aw_count[LOG_OUTSTANDING];

    reg [31:0]            b_due_q [0:QUEUE-1];
    reg                   b_err_q [0:QUEUE-1];
    reg [LOG_OUTSTANDING:0] b_head;
    reg [LOG_OUTSTANDING:0] b_tail;
    wire [LOG_OUTSTANDING:0] b_count = b_tail - b_head;
    wire b_empty = b_head == b_tail;

    reg  [7:0]  w_beat;
    reg         w_err;
    wire [31:0] w_addr = aw_addr_q[aw_head[LOG_OUTSTANDING-1:0]] + ({24'd0, w_beat} << LOG_BUS);
    wire        w_ok = in_range(w_addr);
    assign wready = aw_head != aw_tail && !b_count[LOG_OUTSTANDING];
    wire        w_fire = wvalid && wready;

    reg [BUS-1:0] strobe_mask;
    integer lane;
    always @* begin
        for (lane = 0; lane < BUS_BYTES; lane = lane + 1)
            strobe_mask[lane*8 +: 8] = {8{wstrb[lane]}};
    end

    assign bvalid = !b_empty && b_due_q[b_head[LOG_OUTSTANDING-1:0]] <= now;
    assign bresp = b_err_q[b_head[LOG_OUTSTANDING-1:0]] ? 2'b10 : 2'b00;

    always @(posedge clk) begin
        if (rst) begin
            aw_head <= 0;
            aw_tail <= 0;
            b_head <= 0;
            b_tail <= 0;
            w_beat <= 8'd0;
            w_err <= 1'b0;
        end else begin
            if (awvalid && awready) begin
                aw_addr_q[aw_tail[LOG_OUTSTANDING-1:0]] <= awaddr;
                aw_tail <= aw_tail + 1'b1;
            end
            if (w_fire) begin
                if (w_ok) begin
                    mem[w_addr[LOG_BUS +: LOG_MEM_WORDS]] <=
                        (mem[w_addr[LOG_BUS +: LOG_MEM_WORDS]] & ~strobe_mask)
                        | (wdata & strobe_mask);
                end
                if (wlast) begin
                    w_beat <= 8'd0;
                    w_err <= 1'b0;
                    aw_head <= aw_head + 1'b1;
                    b_due_q[b_tail[LOG_OUTSTANDING-1:0]] <= now + {24'd0, write_latency};
                    b_err_q[b_tail[LOG_OUTSTANDING-1:0]] <= w_err || !w_ok;
                    b_tail <= b_tail + 1'b1;
                end else begin
                    w_beat <= w_beat + 8'd1;
                    w_err <= w_err || !w_ok;
                end
            end
            if (bvalid && bready) b_head <= b_head + 1'b1;
        end
    end

    // the length of a write burst is implied by WLAST
    /* verilator lint_off UNUSEDSIGNAL */
    wire unused = &{1'b0, awlen};
    /* verilator lint_on UNUSEDSIGNAL */
endmodule

`default_nettype wire
