`default_nettype none

// x * y on DSP48s: x wider than the 18-bit port is split at bit 17 (low part
// unsigned), so each multiply fits one DSP48E1/E2 (25 x 18 signed).
(* use_dsp = "yes" *)
module hc_alu_dsp_product #(
    parameter integer XW = 32,
    parameter integer YW = 25
) (
    input  wire signed [XW-1:0]    x,
    input  wire signed [YW-1:0]    y,
    output wire signed [XW+YW-1:0] product
);
    localparam integer SPLIT = 17;

    generate
        if (XW <= SPLIT + 1) begin : g_one
            assign product = x * y;
        end else begin : g_two
            wire signed [SPLIT:0] x_low = {1'b0, x[SPLIT-1:0]};
            wire signed [XW-SPLIT-1:0] x_high = x[XW-1:SPLIT];
            wire signed [SPLIT+YW:0] low = x_low * y;
            wire signed [XW-SPLIT+YW-1:0] high = x_high * y;
            assign product = (XW+YW)'(low) + ((XW+YW)'(high) <<< SPLIT);
        end
    endgenerate
endmodule

`default_nettype wire
