// On-chip buffer: DEPTH entries of BANKS bus-beat-wide banks. The DMA writes one
// bank (one beat) per cycle; the GEMM core and the ALU write whole entries. Each
// read port returns a whole entry one cycle after `read_en` and holds it until the
// next read, so a consumer may stall without losing the value.
`default_nettype none

module hc_ram #(
    parameter integer BANKS = 2,
    parameter integer BANK_BITS = 64,
    parameter integer DEPTH = 1024,
    parameter integer ADDR_BITS = 10,
    parameter integer READ_PORTS = 1
) (
    input  wire                                   clk,
    input  wire [BANKS-1:0]                       write_en,
    input  wire [ADDR_BITS-1:0]                   write_addr,
    input  wire [BANKS*BANK_BITS-1:0]             write_data,
    input  wire [READ_PORTS-1:0]                  read_en,
    input  wire [READ_PORTS*ADDR_BITS-1:0]        read_addr,
    output wire [READ_PORTS*BANKS*BANK_BITS-1:0]  read_data
);
    genvar bank;
    genvar port;
    generate
        for (bank = 0; bank < BANKS; bank = bank + 1) begin : g_bank
            reg [BANK_BITS-1:0] cells [0:DEPTH-1];
            integer entry;
            // The simulator starts every run with zeroed buffers; so does the RTL.
            initial begin
                for (entry = 0; entry < DEPTH; entry = entry + 1) cells[entry] = 0;
            end
            always @(posedge clk) begin
                if (write_en[bank]) cells[write_addr] <= write_data[bank*BANK_BITS +: BANK_BITS];
            end
            for (port = 0; port < READ_PORTS; port = port + 1) begin : g_port
                reg [BANK_BITS-1:0] data_q;
                initial data_q = 0;
                always @(posedge clk) begin
                    if (read_en[port]) data_q <= cells[read_addr[port*ADDR_BITS +: ADDR_BITS]];
                end
                assign read_data[(port*BANKS + bank)*BANK_BITS +: BANK_BITS] = data_q;
            end
        end
    endgenerate
endmodule

`default_nettype wire
