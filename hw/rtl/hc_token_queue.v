// A dependency-token queue: tokens carry no data, so the queue is a counter.
// The producer checks `has_room` when its instruction issues and pushes when it
// completes; being the only producer, nobody can take the slot in between.
`default_nettype none

module hc_token_queue #(
    parameter integer DEPTH = 64,
    parameter integer COUNT_BITS = 7
) (
    input  wire                  clk,
    input  wire                  rst,
    input  wire                  push,
    input  wire                  pop,
    output wire                  has_token,
    output wire                  has_room,
    output reg  [COUNT_BITS-1:0] count
);
    localparam [COUNT_BITS-1:0] CAPACITY = DEPTH[COUNT_BITS-1:0];

    assign has_token = count != 0;
    assign has_room = count < CAPACITY;

    always @(posedge clk) begin
        if (rst) count <= 0;
        else if (push && !pop) count <= count + 1'b1;
        else if (pop && !push) count <= count - 1'b1;
    end
endmodule

`default_nettype wire
