// Simulation harness of the full-system bench: hc_top with its DRAM, an AXI4 slave
// memory written in Verilog (hc_bench_memory.v), so that the simulator runs the whole
// machine and the Python bench (hw/tb/hc_system_bench.py) only drives the AXI4-Lite
// control port and loads and dumps the memory before and after a run. The memory is
// an instance, not part of this scope, so that a simulator's lookup of the ports by
// name does not walk its millions of words.
`default_nettype none
`include "hc_config.vh"

module hc_bench_top #(
    parameter integer LOG_MEM_WORDS = 22,
    parameter integer LOG_OUTSTANDING = 4
) (
    input  wire        clk /*verilator public_flat_rw*/,
    input  wire        rst /*verilator public_flat_rw*/,
    // AXI4-Lite control slave of hc_top
    input  wire [7:0]  s_axil_awaddr /*verilator public_flat_rw*/,
    input  wire        s_axil_awvalid /*verilator public_flat_rw*/,
    output wire        s_axil_awready /*verilator public_flat_rw*/,
    input  wire [31:0] s_axil_wdata /*verilator public_flat_rw*/,
    input  wire        s_axil_wvalid /*verilator public_flat_rw*/,
    output wire        s_axil_wready /*verilator public_flat_rw*/,
    output wire [1:0]  s_axil_bresp /*verilator public_flat_rw*/,
    output wire        s_axil_bvalid /*verilator public_flat_rw*/,
    input  wire        s_axil_bready /*verilator public_flat_rw*/,
    input  wire [7:0]  s_axil_araddr /*verilator public_flat_rw*/,
    input  wire        s_axil_arvalid /*verilator public_flat_rw*/,
    output wire        s_axil_arready /*verilator public_flat_rw*/,
    output wire [31:0] s_axil_rdata /*verilator public_flat_rw*/,
    output wire [1:0]  s_axil_rresp /*verilator public_flat_rw*/,
    output wire        s_axil_rvalid /*verilator public_flat_rw*/,
    input  wire        s_axil_rready /*verilator public_flat_rw*/,
    output wire        irq /*verilator public_flat_rw*/,
    // the memory: bulk load and dump, size and timing
    input  wire        mem_load /*verilator public_flat_rw*/,
    input  wire        mem_dump /*verilator public_flat_rw*/,
    input  wire [31:0] mem_words /*verilator public_flat_rw*/,
    input  wire [7:0]  mem_read_latency /*verilator public_flat_rw*/,
    input  wire [7:0]  mem_write_latency /*verilator public_flat_rw*/
);
    localparam integer BUS = `HC_BUS_BITS;
    localparam integer BUS_BYTES = `HC_BUS_BYTES;

    wire [31:0]          awaddr;
    wire [7:0]           awlen;
    wire                 awvalid;
    wire                 awready;
    wire [BUS-1:0]       wdata;
    wire [BUS_BYTES-1:0] wstrb;
    wire                 wlast;
    wire                 wvalid;
    wire                 wready;
    wire [1:0]           bresp;
    wire                 bvalid;
    wire                 bready;
    wire [31:0]          araddr;
    wire [7:0]           arlen;
    wire                 arvalid;
    wire                 arready;
    wire [BUS-1:0]       rdata;
    wire [1:0]           rresp;
    wire                 rlast;
    wire                 rvalid;
    wire                 rready;

    /* verilator lint_off PINCONNECTEMPTY */
    hc_top top (
        .clk(clk), .rst(rst),
        .s_axil_awaddr(s_axil_awaddr), .s_axil_awprot(3'd0), .s_axil_awvalid(s_axil_awvalid),
        .s_axil_awready(s_axil_awready), .s_axil_wdata(s_axil_wdata), .s_axil_wstrb(4'hf),
        .s_axil_wvalid(s_axil_wvalid), .s_axil_wready(s_axil_wready),
        .s_axil_bresp(s_axil_bresp), .s_axil_bvalid(s_axil_bvalid),
        .s_axil_bready(s_axil_bready), .s_axil_araddr(s_axil_araddr), .s_axil_arprot(3'd0),
        .s_axil_arvalid(s_axil_arvalid), .s_axil_arready(s_axil_arready),
        .s_axil_rdata(s_axil_rdata), .s_axil_rresp(s_axil_rresp),
        .s_axil_rvalid(s_axil_rvalid), .s_axil_rready(s_axil_rready), .irq(irq),
        .m_axi_awid(), .m_axi_awaddr(awaddr), .m_axi_awlen(awlen), .m_axi_awsize(),
        .m_axi_awburst(), .m_axi_awlock(), .m_axi_awcache(), .m_axi_awprot(),
        .m_axi_awvalid(awvalid), .m_axi_awready(awready),
        .m_axi_wdata(wdata), .m_axi_wstrb(wstrb), .m_axi_wlast(wlast), .m_axi_wvalid(wvalid),
        .m_axi_wready(wready), .m_axi_bid(1'b0), .m_axi_bresp(bresp), .m_axi_bvalid(bvalid),
        .m_axi_bready(bready),
        .m_axi_arid(), .m_axi_araddr(araddr), .m_axi_arlen(arlen), .m_axi_arsize(),
        .m_axi_arburst(), .m_axi_arlock(), .m_axi_arcache(), .m_axi_arprot(),
        .m_axi_arvalid(arvalid), .m_axi_arready(arready),
        .m_axi_rid(1'b0), .m_axi_rdata(rdata), .m_axi_rresp(rresp), .m_axi_rlast(rlast),
        .m_axi_rvalid(rvalid), .m_axi_rready(rready)
    );
    /* verilator lint_on PINCONNECTEMPTY */

    hc_bench_memory #(.LOG_MEM_WORDS(LOG_MEM_WORDS), .LOG_OUTSTANDING(LOG_OUTSTANDING)) memory (
        .clk(clk), .rst(rst),
        .load(mem_load), .dump(mem_dump), .words(mem_words),
        .read_latency(mem_read_latency), .write_latency(mem_write_latency),
        .awaddr(awaddr), .awlen(awlen), .awvalid(awvalid), .awready(awready),
        .wdata(wdata), .wstrb(wstrb), .wlast(wlast), .wvalid(wvalid), .wready(wready),
        .bresp(bresp), .bvalid(bvalid), .bready(bready),
        .araddr(araddr), .arlen(arlen), .arvalid(arvalid), .arready(arready),
        .rdata(rdata), .rresp(rresp), .rlast(rlast), .rvalid(rvalid), .rready(rready)
    );
endmodule

`default_nettype wire
