// The exact product of one ALU lane, x * y for two signed acc_bits-bit operands
// (docs/isa.md section 5: MUL keeps the whole 2*acc_bits-bit product), split
// between DSP48s and logic so that the xc7z020 fits (docs/fpga.md).
//
// With acc_bits = 32 the operand y = y_top * 2^24 + y_low, y_low = y[23:0] taken
// as unsigned and y_top = y[31:24] signed, so
//     x * y = x * y_low + (x * y_top) * 2^24          (exact, two's complement)
// x * y_low goes to two DSP48s (hc_alu_dsp_product: each multiply at most 25 x 18
// bits signed, one DSP each), x * y_top, a 32 x 8 product, to logic
// (hc_alu_lut_product). Narrower accumulators (acc_bits <= 24) take the whole
// product on the DSPs. 16 lanes thus use 32 DSPs beside the GEMM core's 128, and
// the logic multiplies an eighth of the bits a 32 x 64 LUT product would.
`default_nettype none

module hc_alu_product #(
    parameter integer AB = 32
) (
    input  wire signed [AB-1:0]   x,
    input  wire signed [AB-1:0]   y,
    output wire signed [2*AB-1:0] product
);
    localparam integer PW = 2 * AB;
    // bits of y the DSPs take: 24 unsigned, one DSP's 25-bit signed port
    localparam integer LOW = 24;

    generate
        if (AB > LOW) begin : g_split
            wire signed [LOW:0] y_low = {1'b0, y[LOW-1:0]};
            wire signed [AB-LOW-1:0] y_top = y[AB-1:LOW];
            wire signed [AB+LOW:0] low_product;
            wire signed [2*AB-LOW-1:0] top_product;
            hc_alu_dsp_product #(.XW(AB), .YW(LOW + 1)) dsp (
                .x(x), .y(y_low), .product(low_product));
            hc_alu_lut_product #(.XW(AB), .YW(AB - LOW)) logic_part (
                .x(x), .y(y_top), .product(top_product));
            // both parts and their sum fit 2*acc_bits bits (|x * y| <= 2^(2*AB-2))
            assign product = PW'(low_product) + (PW'(top_product) <<< LOW);
        end else begin : g_whole
            hc_alu_dsp_product #(.XW(AB), .YW(AB)) dsp (.x(x), .y(y), .product(product));
        end
    endgenerate
endmodule

`default_nettype wire
