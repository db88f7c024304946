# Synthesize the accelerator for a Xilinx 7-series device (Yosys synth_xilinx) and
# write its resource report. hw/synth/run_synth.py generates the config header and
# sets the environment this script reads:
#   HC_INCLUDE_DIR  folder holding hc_config.vh
#   HC_SOURCES      the Verilog sources, space-separated
#   HC_REPORT       path of the statistics report to write
yosys -import

foreach source $::env(HC_SOURCES) {
    read_verilog -sv -I$::env(HC_INCLUDE_DIR) $source
}
# -flatten lets the DSP and BRAM mappers see the whole datapath; the parameters
# keep the default 7-series mapping (DSP48E1, RAMB36E1/RAMB18E1, LUT6).
synth_xilinx -top hc_top -family xc7 -flatten
tee -o $::env(HC_REPORT) stat
