// Shares the AXI read channels among the DMA clients burst by burst, so that
// transfers of different modules proceed together (as the timing model has them)
// instead of one waiting for another's whole transfer. Address requests are
// granted round-robin; the owner of every granted burst enters a FIFO, and read
// data, which the memory returns in request order (all IDs are 0), goes to the
// owner at its head until RLAST.
`default_nettype none
`include "hc_config.vh"

module hc_read_arbiter #(
    parameter integer CLIENTS = 3,
    parameter integer LOG_OUTSTANDING = 3
) (
    input  wire                             clk,
    input  wire                             rst,
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
    input  wire                             r_last,
    input  wire                             r_valid,
    output wire                             r_ready
);
    // --- address channel: a registered choice, held until the handshake ---------------
    reg               presenting;
    reg [CLIENTS-1:0] owner;       // one-hot client whose request is on the bus
    reg [CLIENTS-1:0] last_grant;  // one-hot, for round-robin
    reg [CLIENTS-1:0] winner;
    integer step;
    integer client;

    wire [LOG_OUTSTANDING:0] outstanding;
    wire outstanding_full;
    wire outstanding_empty;
    wire [CLIENTS-1:0] data_owner;

    // the first requesting client after the last granted one, one-hot
    always @* begin
        winner = {CLIENTS{1'b0}};
        for (step = CLIENTS; step >= 1; step = step - 1) begin
            for (client = 0; client < CLIENTS; client = client + 1) begin
                if (client_ar_valid[client]
                    && |(((last_grant << step) | (last_grant >> (CLIENTS - step)))
                         & ({{(CLIENTS-1){1'b0}}, 1'b1} << client))) begin
                    winner = {{(CLIENTS-1){1'b0}}, 1'b1} << client;
                end
            end
        end
    end

    wire granted = presenting && ar_ready;

    always @(posedge clk) begin
        if (rst) begin
            presenting <= 1'b0;
            owner <= {CLIENTS{1'b0}};
            last_grant <= {{(CLIENTS-1){1'b0}}, 1'b1};
        end else if (!presenting) begin
            if (winner != 0 && !outstanding_full) begin
                presenting <= 1'b1;
                owner <= winner;
            end
        end else if (ar_ready) begin
            presenting <= 1'b0;
            last_grant <= owner;
        end
    end

    reg [31:0] selected_addr;
    reg [7:0]  selected_len;
    always @* begin
        selected_addr = 32'd0;
        selected_len = 8'd0;
        for (client = 0; client < CLIENTS; client = client + 1) begin
            if (owner[client]) begin
                selected_addr = client_ar_addr[client*32 +: 32];
                selected_len = client_ar_len[client*8 +: 8];
            end
        end
    end

    assign ar_addr = selected_addr;
    assign ar_len = selected_len;
    assign ar_valid = presenting;
    assign client_ar_ready = granted ? owner : {CLIENTS{1'b0}};

    // --- data channel: in request order ------------------------------------------------
    wire beat_taken = r_valid && r_ready;

    hc_fifo #(.WIDTH(CLIENTS), .LOG_DEPTH(LOG_OUTSTANDING)) owners (
        .clk(clk), .rst(rst),
        .push(granted), .push_data(owner),
        .pop(beat_taken && r_last), .head(data_owner), .empty(outstanding_empty),
        .full(outstanding_full), .count(outstanding)
    );

    assign client_r_data = r_data;
    assign client_r_valid = r_valid && !outstanding_empty ? data_owner : {CLIENTS{1'b0}};
    assign r_ready = !outstanding_empty && |(data_owner & client_r_ready);

    // the count only documents the FIFO; fullness is what gates new requests
    /* verilator lint_off UNUSEDSIGNAL */
    wire unused_count = &{1'b0, outstanding};
    /* verilator lint_on UNUSEDSIGNAL */
endmodule

`default_nettype wire
