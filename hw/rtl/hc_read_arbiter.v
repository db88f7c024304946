// Shares the AXI read channels among the DMA clients. A client holds
// `request` for a whole transfer (all its bursts and beats), so read data never
// interleaves between clients; a lower index wins when several ask at once.
`default_nettype none
`include "hc_config.vh"

module hc_read_arbiter #(
    parameter integer CLIENTS = 3
) (
    input  wire                             clk,
    input  wire                             rst,
    input  wire [CLIENTS-1:0]               request,
    input  wire [CLIENTS*32-1:0]            client_ar_addr,
    input  wire [CLIENTS*8-1:0]             client_ar_len,
    input  wire [CLIENTS-1:0]               client_ar_valid,
    output wire [CLIENTS-1:0]               client_ar_ready,
    output wire [`HC_BUS_BITS-1:0]          client_r_data,
    output wire [CLIENTS-1:0]               client_r_valid,
    input  wire [CLIENTS-1:0]               client_r_ready,
    output wire [31:0]                      ar_addr,
    output wire [7:0]                       ar_len,
    output wire                             ar_valid,
    input  wire                             ar_ready,
    input  wire [`HC_BUS_BITS-1:0]          r_data,
    input  wire                             r_valid,
    output wire                             r_ready
);
    reg [CLIENTS-1:0] grant;
    reg [CLIENTS-1:0] winner;
    integer client;

    // the lowest-numbered requesting client, one-hot
    always @* begin
        winner = {CLIENTS{1'b0}};
        for (client = CLIENTS - 1; client >= 0; client = client - 1) begin
            if (request[client]) winner = {CLIENTS{1'b0}} | (1 << client);
        end
    end

    always @(posedge clk) begin
        if (rst) grant <= {CLIENTS{1'b0}};
        else if (grant == 0) grant <= winner;
        else if ((grant & request) == 0) grant <= {CLIENTS{1'b0}};
    end

    reg [31:0] selected_addr;
    reg [7:0]  selected_len;
    always @* begin
        selected_addr = 32'd0;
        selected_len = 8'd0;
        for (client = 0; client < CLIENTS; client = client + 1) begin
            if (grant[client]) begin
                selected_addr = client_ar_addr[client*32 +: 32];
                selected_len = client_ar_len[client*8 +: 8];
            end
        end
    end

    assign ar_addr = selected_addr;
    assign ar_len = selected_len;
    assign ar_valid = |(grant & client_ar_valid);
    assign client_ar_ready = ar_ready ? grant : {CLIENTS{1'b0}};
    assign client_r_data = r_data;
    assign client_r_valid = r_valid ? grant : {CLIENTS{1'b0}};
    assign r_ready = |(grant & client_r_ready);
endmodule

`default_nettype wire
