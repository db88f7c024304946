# Synthesize the accelerator for a Xilinx 7-series device (Yosys synth_xilinx) and
# write its resource report. hw/synth/run_synth.py generates the config header and
# sets the environment this script reads:
#   HC_INCLUDE_DIR  folder holding hc_config.vh
#   HC_SOURCES      the Verilog sources, space-separated
#   HC_REPORT       path of the statistics report to write
#   HC_FAMILY       Yosys device family: xc7 (7-series, Zynq-7000) or xcup (UltraScale+)
yosys -import

foreach source $::env(HC_SOURCES) {
    read_verilog -sv -I$::env(HC_INCLUDE_DIR) $source
}
hierarchy -top hc_top
yosys proc
# Modules marked (* use_dsp = "no" *) (the top 32 x 8 part of each ALU lane's
# product, hc_alu_lut_product) get their multiplies as logic, as Vivado does for that
# attribute: the DSPs go to the GEMM core and two per ALU lane. alumacc and maccmap
# build a carry-save tree of the product bits.
alumacc A:use_dsp=no t:\$mul %i
maccmap A:use_dsp=no t:\$macc %i
# -flatten lets the DSP and BRAM mappers see the whole datapath; the family's
# default mapping otherwise (xc7: DSP48E1, RAMB36E1/RAMB18E1, LUT6; xcup: DSP48E2,
# RAMB36E2/RAMB18E2).
set family xc7
if {[info exists ::env(HC_FAMILY)]} { set family $::env(HC_FAMILY) }
synth_xilinx -top hc_top -family $family -flatten
tee -o $::env(HC_REPORT) stat
