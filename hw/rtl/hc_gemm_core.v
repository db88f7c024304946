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

    // exact signed product, both factors sign-extended to the product's width
    function [PRODUCT_BITS-1:0] product(input [IB-1:0] a, input [WB-1:0] w);
        reg signed [PRODUCT_BITS-1:0] wide_a;
        reg signed [PRODUCT_BITS-1:0] wide_w;
        begin
            wide_a = {{WB{a[IB-1]}}, a};
            wide_w = {{IB{w[WB-1]}}, w};
            product = wide_a * wide_w;
        end
    endfunction

    genvar b;
    genvar n;
    generate
        for (b = 0; b < `HC_BATCH; b = b + 1) begin : g_row
            for (n = 0; n < `HC_BLOCK_OUT; n = n + 1) begin : g_col
                reg [SUM_BITS-1:0] sum;
                reg [PRODUCT_BITS-1:0] term;
                integer k;
                always @* begin
                    sum = {SUM_BITS{1'b0}};
                    for (k = 0; k < `HC_BLOCK_IN; k = k + 1) begin
                        term = product(inp[(b*`HC_BLOCK_IN + k)*IB +: IB],
                                       wgt[(n*`HC_BLOCK_IN + k)*WB +: WB]);
                        sum = sum + {{`HC_LOG_BLOCK_IN{term[PRODUCT_BITS-1]}}, term};
                    end
                end
                if (SUM_BITS >= AB) begin : g_wrap
                    assign dot[(b*`HC_BLOCK_OUT + n)*AB +: AB] = sum[AB-1:0];
                end else begin : g_extend
                    assign dot[(b*`HC_BLOCK_OUT + n)*AB +: AB] =
                        {{(AB-SUM_BITS){sum[SUM_BITS-1]}}, sum};
                end
            end
        end
    endgenerate
endmodule

`default_nettype wire
