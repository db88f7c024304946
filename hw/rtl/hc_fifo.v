// Synchronous first-word-fall-through FIFO: `head` shows the oldest entry while
// `empty` is low. Used for the per-module command queues and the fetch staging queue.
`default_nettype none

module hc_fifo #(
    parameter integer WIDTH = 128,
    parameter integer LOG_DEPTH = 6
) (
    input  wire                 clk,
    input  wire                 rst,
    input  wire                 push,
    input  wire [WIDTH-1:0]     push_data,
    input  wire                 pop,
    output wire [WIDTH-1:0]     head,
    output wire                 empty,
    output wire                 full,
    output wire [LOG_DEPTH:0]   count
);
    reg [WIDTH-1:0] entries [0:(1 << LOG_DEPTH) - 1];
    reg [LOG_DEPTH:0] write_ptr;
    reg [LOG_DEPTH:0] read_ptr;

    assign count = write_ptr - read_ptr;
    assign empty = write_ptr == read_ptr;
    assign full = count[LOG_DEPTH];
    assign head = entries[read_ptr[LOG_DEPTH-1:0]];

    // Storage has no reset so that synthesis can map it to distributed RAM.
    always @(posedge clk) begin
        if (push && !full) entries[write_ptr[LOG_DEPTH-1:0]] <= push_data;
    end

    always @(posedge clk) begin
        if (rst) begin
            write_ptr <= 0;
            read_ptr <= 0;
        end else begin
            if (push && !full) write_ptr <= write_ptr + 1'b1;
            if (pop && !empty) read_ptr <= read_ptr + 1'b1;
        end
    end
endmodule

`default_nettype wire
