// One ALU lane's copy of the lookup table (docs/isa.md: LUT, 256 int8 entries
// loaded as 64 words of four). Four banks of 64 x 8 bits, one per byte of a word, so
// a word is written in one cycle; read asynchronously by the entry the lane's value
// selects (bank = index[1:0], word = index[7:2]). Synthesis maps each bank to
// distributed RAM (LUTRAM): the whole copy costs tens of LUTs, where a 256-to-1
// multiplexer of 8 bits over a register table costs several hundred per lane.
`default_nettype none

module hc_alu_table (
    input  wire        clk,
    input  wire        write,
    input  wire [5:0]  write_word,
    input  wire [31:0] write_data,
    input  wire [7:0]  index,
    output wire [7:0]  entry
);
    reg [7:0] bank0 [0:63];
    reg [7:0] bank1 [0:63];
    reg [7:0] bank2 [0:63];
    reg [7:0] bank3 [0:63];
    integer i;
    // a table read before any LOAD is an error the checker refuses; zeros keep the
    // simulators free of X all the same
    initial begin
        for (i = 0; i < 64; i = i + 1) begin
            bank0[i] = 8'd0;
            bank1[i] = 8'd0;
            bank2[i] = 8'd0;
            bank3[i] = 8'd0;
        end
    end
    always @(posedge clk) begin
        if (write) begin
            bank0[write_word] <= write_data[7:0];
            bank1[write_word] <= write_data[15:8];
            bank2[write_word] <= write_data[23:16];
            bank3[write_word] <= write_data[31:24];
        end
    end
    wire [5:0] word = index[7:2];
    wire [7:0] read0 = bank0[word];
    wire [7:0] read1 = bank1[word];
    wire [7:0] read2 = bank2[word];
    wire [7:0] read3 = bank3[word];
    assign entry = index[1] ? (index[0] ? read3 : read2) : (index[0] ? read1 : read0);
endmodule

`default_nettype wire
