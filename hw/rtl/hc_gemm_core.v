// The GEMM core's arithmetic: for one input tile [batch][block_in] and one weight
// tile [block_out][block_in], dot[b][n] = sum_k inp[b][k] * wgt[n][k], exact, then
// wrapped to the accumulator width (addition mod 2**acc_bits is what the ISA
// specifies, so truncating the exact sum loses nothing).
`default_nettype none
`include "hc_config.vh"

module hc_gemm_core (
    input  wire [`HC_INP_TILE_BITS-1:0] inp,
    input  wire [`HC_WGT_TILE_BITS-1:0] wgt,
    output wire [`HC_ACC_TILE_BITS-1:0] dot
);
    localparam integer IB = `HC_INP_BITS;
    localparam integer WB = `HC_WGT_BITS;
    localparam integer AB = `HC_ACC_BITS;
    localparam integer PRODUCT_BITS = IB + WB;
    localparam integer SUM_BITS = PRODUCT_BITS + `HC_LOG_BLOCK_IN;

    // One process computes the whole tile and updates `dot` once, so that an
    // event-driven simulator wakes what reads it once per new operand pair.
    // Signed operands: every product and the sum are exact at SUM_BITS; the sum is
    // then wrapped, or sign-extended, to the accumulator width.
    reg [`HC_ACC_TILE_BITS-1:0] result;
    reg [`HC_ACC_TILE_BITS-1:0] tile;
    reg signed [SUM_BITS-1:0] sum;
    integer b;
    integer n;
    integer k;
    always @* begin
        for (b = 0; b < `HC_BATCH; b = b + 1) begin
            for (n = 0; n < `HC_BLOCK_OUT; n = n + 1) begin
                sum = {SUM_BITS{1'b0}};
                for (k = 0; k < `HC_BLOCK_IN; k = k + 1) begin
                    sum = sum + $signed(inp[(b*`HC_BLOCK_IN + k)*IB +: IB])
                              * $signed(wgt[(n*`HC_BLOCK_IN + k)*WB +: WB]);
                end
                tile[(b*`HC_BLOCK_OUT + n)*AB +: AB] = AB'(sum);
            end
        end
        result = tile;
    end
    assign dot = result;
endmodule

`default_nettype wire
