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
    localparam integer WIDTH = BANKS * BANK_BITS;

    // One array of whole entries with a write enable per bank: synthesis maps it to
    // block RAM with byte-lane enables, and an event-driven simulator sees a read
    // port change once per read (not once per bank).
    reg [WIDTH-1:0] cells [0:DEPTH-1];
    integer entry;
    integer bank;
    // The simulator starts every run with zeroed buffers; so does the RTL.
    initial begin
        for (entry = 0; entry < DEPTH; entry = entry + 1) cells[entry] = {WIDTH{1'b0}};
    end
    always @(posedge clk) begin
        if (&write_en) begin
            cells[write_addr] <= write_data;
        end else begin
            for (bank = 0; bank < BANKS; bank = bank + 1) begin
                if (write_en[bank])
                    cells[write_addr][bank*BANK_BITS +: BANK_BITS]
                        <= write_data[bank*BANK_BITS +: BANK_BITS];
            end
        end
    end

    genvar port;
    generate
        for (port = 0; port < READ_PORTS; port = port + 1) begin : g_port
            reg [WIDTH-1:0] data_q;
            initial data_q = {WIDTH{1'b0}};
            always @(posedge clk) begin
                if (read_en[port]) data_q <= cells[read_addr[port*ADDR_BITS +: ADDR_BITS]];
            end
            assign read_data[port*WIDTH +: WIDTH] = data_q;
        end
    endgenerate
endmodule

`default_nettype wire
