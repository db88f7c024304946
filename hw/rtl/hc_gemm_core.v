// The GEMM core's arithmetic: for one input tile [batch][block_in] and one weight
// tile [block_out][block_in], dot[b][n] = sum_k inp[b][k] * wgt[n][k], exact, then
// wrapped to the accumulator width (addition mod 2**acc_bits is what the ISA
// specifies, so truncating the exact sum loses nothing).
//
// Two products per multiplier (PACKED): the weights of outputs n and n+1 share the
// input element x = inp[b][k], so one multiply of x by the packed weight
// w = wgt[n+1][k] * 2**S + wgt[n][k] gives p = wgt[n+1][k]*x * 2**S + wgt[n][k]*x.
// S = IB + WB bits hold any signed product of an IB-bit and a WB-bit operand, so
//   wgt[n][k]*x   = the low S bits of p, read as signed, and
//   wgt[n+1][k]*x = (p >>> S) + bit S-1 of p (the borrow a negative low product took),
// both exact. With 8-bit operands the multiply is 25 x 8 bits: one DSP48E1
// (25 x 18) computes two int8 products, halving the DSPs of the core.
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
    // the packed operand (one bit more than WB + S: wgt[n+1]*2**S + wgt[n] reaches
    // -2**(WB+S-1) - 2**(WB-1)) must fit the DSP48E1's 25-bit port, x its 18-bit port
    localparam integer PACK_SHIFT = PRODUCT_BITS;
    localparam integer PACKED_BITS = WB + PACK_SHIFT + 1;
    localparam PACKED = (`HC_BLOCK_OUT % 2 == 0) && PACKED_BITS <= 25 && IB <= 18;
    localparam integer OUT_STEP = PACKED ? 2 : 1;

    // One process computes the whole tile and updates `dot` once, so that an
    // event-driven simulator wakes what reads it once per new operand pair.
    // Signed operands: every product and the sum are exact at SUM_BITS; the sum is
    // then wrapped, or sign-extended, to the accumulator width.
    reg [`HC_ACC_TILE_BITS-1:0] result;
    reg [`HC_ACC_TILE_BITS-1:0] tile;
    reg signed [SUM_BITS-1:0] sum;
    reg signed [SUM_BITS-1:0] sum_high;
    reg signed [PACKED_BITS-1:0] packed_weight;
    reg signed [PACKED_BITS+IB-1:0] packed_product;
    reg signed [PRODUCT_BITS-1:0] low_product;
    integer b;
    integer n;
    integer k;
    always @* begin
        for (b = 0; b < `HC_BATCH; b = b + 1) begin
            for (n = 0; n < `HC_BLOCK_OUT; n = n + OUT_STEP) begin
                sum = {SUM_BITS{1'b0}};
                sum_high = {SUM_BITS{1'b0}};
                for (k = 0; k < `HC_BLOCK_IN; k = k + 1) begin
                    if (PACKED) begin
                        // explicit widths: each signed operand sign-extended to the
                        // width of the operation it enters (lint-clean, same values)
                        packed_weight =
                            (PACKED_BITS'($signed(wgt[((n+1)*`HC_BLOCK_IN + k)*WB +: WB]))
                             <<< PACK_SHIFT)
                            + PACKED_BITS'($signed(wgt[(n*`HC_BLOCK_IN + k)*WB +: WB]));
                        packed_product = packed_weight
                            * (PACKED_BITS+IB)'($signed(inp[(b*`HC_BLOCK_IN + k)*IB +: IB]));
                        low_product = packed_product[PRODUCT_BITS-1:0];
                        sum = sum + SUM_BITS'(low_product);
                        // the high product is below 2**(SUM_BITS-1) in magnitude:
                        // truncating the shifted value to SUM_BITS keeps it exact
                        sum_high = sum_high + SUM_BITS'(packed_product >>> PACK_SHIFT)
                                            + SUM_BITS'({1'b0, packed_product[PACK_SHIFT-1]});
                    end else begin
                        sum = sum + $signed(inp[(b*`HC_BLOCK_IN + k)*IB +: IB])
                                  * $signed(wgt[(n*`HC_BLOCK_IN + k)*WB +: WB]);
                    end
                end
                tile[(b*`HC_BLOCK_OUT + n)*AB +: AB] = AB'(sum);
                if (PACKED) tile[(b*`HC_BLOCK_OUT + n + 1)*AB +: AB] = AB'(sum_high);
            end
        end
        result = tile;
    end
    assign dot = result;
endmodule

`default_nettype wire
