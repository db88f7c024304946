`default_nettype none

// x * y in logic: Vivado reads use_dsp; the Yosys flow (hw/synth/synth_xilinx.tcl)
// maps the multiplies of modules so marked to LUTs.
(* use_dsp = "no" *)
module hc_alu_lut_product #(
    parameter integer XW = 32,
    parameter integer YW = 8
) (
    input  wire signed [XW-1:0]    x,
    input  wire signed [YW-1:0]    y,
    output wire signed [XW+YW-1:0] product
);
    assign product = x * y;
endmodule

`default_nettype wire
