// The accelerator: fetch, the load / compute / store modules, the four token
// queues, the on-chip buffers, an AXI4-Lite control port (hc_ctrl) and one AXI4
// master port to DRAM. Read-channel clients in priority order: compute, load,
// fetch. Only the store module writes.
`default_nettype none
`include "hc_config.vh"

module hc_top (
    input  wire                      clk,
    input  wire                      rst,
    // AXI4-Lite control slave
    input  wire [7:0]                s_axil_awaddr,
    input  wire [2:0]                s_axil_awprot,
    input  wire                      s_axil_awvalid,
    output wire                      s_axil_awready,
    input  wire [31:0]               s_axil_wdata,
    input  wire [3:0]                s_axil_wstrb,
    input  wire                      s_axil_wvalid,
    output wire                      s_axil_wready,
    output wire [1:0]                s_axil_bresp,
    output wire                      s_axil_bvalid,
    input  wire                      s_axil_bready,
    input  wire [7:0]                s_axil_araddr,
    input  wire [2:0]                s_axil_arprot,
    input  wire                      s_axil_arvalid,
    output wire                      s_axil_arready,
    output wire [31:0]               s_axil_rdata,
    output wire [1:0]                s_axil_rresp,
    output wire                      s_axil_rvalid,
    input  wire                      s_axil_rready,
    // high from the completion of a stream (STATUS.done) until the next start
    output wire                      irq,
    // AXI4 master to DRAM
    output wire [0:0]                m_axi_awid,
    output wire [31:0]               m_axi_awaddr,
    output wire [7:0]                m_axi_awlen,
    output wire [2:0]                m_axi_awsize,
    output wire [1:0]                m_axi_awburst,
    output wire                      m_axi_awlock,
    output wire [3:0]                m_axi_awcache,
    output wire [2:0]                m_axi_awprot,
    output wire                      m_axi_awvalid,
    input  wire                      m_axi_awready,
    output wire [`HC_BUS_BITS-1:0]   m_axi_wdata,
    output wire [`HC_BUS_BYTES-1:0]  m_axi_wstrb,
    output wire                      m_axi_wlast,
    output wire                      m_axi_wvalid,
    input  wire                      m_axi_wready,
    input  wire [0:0]                m_axi_bid,
    input  wire [1:0]                m_axi_bresp,
    input  wire                      m_axi_bvalid,
    output wire                      m_axi_bready,
    output wire [0:0]                m_axi_arid,
    output wire [31:0]               m_axi_araddr,
    output wire [7:0]                m_axi_arlen,
    output wire [2:0]                m_axi_arsize,
    output wire [1:0]                m_axi_arburst,
    output wire                      m_axi_arlock,
    output wire [3:0]                m_axi_arcache,
    output wire [2:0]                m_axi_arprot,
    output wire                      m_axi_arvalid,
    input  wire                      m_axi_arready,
    input  wire [0:0]                m_axi_rid,
    input  wire [`HC_BUS_BITS-1:0]   m_axi_rdata,
    input  wire [1:0]                m_axi_rresp,
    input  wire                      m_axi_rlast,
    input  wire                      m_axi_rvalid,
    output wire                      m_axi_rready
);
    localparam [2:0] BEAT_SIZE = `HC_LOG_BUS_BYTES;


    assign m_axi_awid = 1'b0;
    assign m_axi_arid = 1'b0;
    assign m_axi_awsize = BEAT_SIZE;
    assign m_axi_arsize = BEAT_SIZE;
    assign m_axi_awburst = 2'b01;
    assign m_axi_arburst = 2'b01;
    assign m_axi_awlock = 1'b0;
    assign m_axi_arlock = 1'b0;
    assign m_axi_awcache = 4'b0011;
    assign m_axi_arcache = 4'b0011;
    assign m_axi_awprot = 3'b000;
    assign m_axi_arprot = 3'b000;
    assign m_axi_wstrb = {`HC_BUS_BYTES{1'b1}};

    // --- control ------------------------------------------------------------------------
    wire        start;
    wire [31:0] insn_addr;
    wire [31:0] insn_count;
    wire        finished;
    wire        retired_load;
    wire        retired_compute;
    wire        retired_store;
    wire        bus_error = (m_axi_rvalid && m_axi_rready && m_axi_rresp[1])
                         || (m_axi_bvalid && m_axi_bresp[1]);
    // a start resets the datapath, so a stream never sees its predecessor's tokens
    wire        datapath_rst = rst || start;

    hc_ctrl ctrl (
        .clk(clk), .rst(rst),
        .s_axil_awaddr(s_axil_awaddr), .s_axil_awvalid(s_axil_awvalid),
        .s_axil_awready(s_axil_awready), .s_axil_wdata(s_axil_wdata),
        .s_axil_wvalid(s_axil_wvalid), .s_axil_wready(s_axil_wready),
        .s_axil_bresp(s_axil_bresp), .s_axil_bvalid(s_axil_bvalid),
        .s_axil_bready(s_axil_bready), .s_axil_araddr(s_axil_araddr),
        .s_axil_arvalid(s_axil_arvalid), .s_axil_arready(s_axil_arready),
        .s_axil_rdata(s_axil_rdata), .s_axil_rresp(s_axil_rresp),
        .s_axil_rvalid(s_axil_rvalid), .s_axil_rready(s_axil_rready),
        .start(start), .insn_addr(insn_addr), .insn_count(insn_count),
        .finished(finished), .irq(irq), .retired_load(retired_load),
        .retired_compute(retired_compute), .retired_store(retired_store),
        .bus_error(bus_error)
    );

    // --- shared read channels, burst by burst: 0 compute, 1 load, 2 fetch ----------------------------------
    wire [3*32-1:0]         read_ar_addr;
    wire [3*8-1:0]          read_ar_len;
    wire [2:0]              read_ar_valid;
    wire [2:0]              read_ar_ready;
    wire [`HC_BUS_BITS-1:0] read_r_data;
    wire [2:0]              read_r_valid;
    wire [2:0]              read_r_ready;

    hc_read_arbiter #(.CLIENTS(3)) read_arbiter (
        .clk(clk), .rst(datapath_rst),
        .client_ar_addr(read_ar_addr), .client_ar_len(read_ar_len),
        .client_ar_valid(read_ar_valid), .client_ar_ready(read_ar_ready),
        .client_r_data(read_r_data), .client_r_valid(read_r_valid),
        .client_r_ready(read_r_ready),
        .ar_addr(m_axi_araddr), .ar_len(m_axi_arlen), .ar_valid(m_axi_arvalid),
        .ar_ready(m_axi_arready), .r_data(m_axi_rdata), .r_last(m_axi_rlast),
        .r_valid(m_axi_rvalid), .r_ready(m_axi_rready)
    );

    // --- fetch and command queues ---------------------------------------------------------
    wire [127:0] load_cmd;
    wire [127:0] compute_cmd;
    wire [127:0] store_cmd;
    wire load_empty;
    wire compute_empty;
    wire store_empty;
    wire load_pop;
    wire compute_pop;
    wire store_pop;

    hc_fetch fetch (
        .clk(clk), .rst(rst), .start(start), .insn_addr(insn_addr), .insn_count(insn_count),
        .ar_addr(read_ar_addr[2*32 +: 32]),
        .ar_len(read_ar_len[2*8 +: 8]), .ar_valid(read_ar_valid[2]),
        .ar_ready(read_ar_ready[2]), .r_data(read_r_data), .r_valid(read_r_valid[2]),
        .r_ready(read_r_ready[2]),
        .load_cmd(load_cmd), .load_empty(load_empty), .load_pop(load_pop),
        .compute_cmd(compute_cmd), .compute_empty(compute_empty), .compute_pop(compute_pop),
        .store_cmd(store_cmd), .store_empty(store_empty), .store_pop(store_pop)
    );

    // --- token queues -------------------------------------------------------------------
    wire load_to_compute_push;
    wire load_to_compute_pop;
    wire load_to_compute_token;
    wire load_to_compute_room;
    wire compute_to_load_push;
    wire compute_to_load_pop;
    wire compute_to_load_token;
    wire compute_to_load_room;
    wire compute_to_store_push;
    wire compute_to_store_pop;
    wire compute_to_store_token;
    wire compute_to_store_room;
    wire store_to_compute_push;
    wire store_to_compute_pop;
    wire store_to_compute_token;
    wire store_to_compute_room;

    /* verilator lint_off PINCONNECTEMPTY */
    hc_token_queue #(.DEPTH(`HC_TOKEN_QUEUE_DEPTH), .COUNT_BITS(`HC_TOKEN_COUNT_BITS))
        load_to_compute (
            .clk(clk), .rst(datapath_rst), .push(load_to_compute_push),
            .pop(load_to_compute_pop), .has_token(load_to_compute_token),
            .has_room(load_to_compute_room), .count()
        );
    hc_token_queue #(.DEPTH(`HC_TOKEN_QUEUE_DEPTH), .COUNT_BITS(`HC_TOKEN_COUNT_BITS))
        compute_to_load (
            .clk(clk), .rst(datapath_rst), .push(compute_to_load_push),
            .pop(compute_to_load_pop), .has_token(compute_to_load_token),
            .has_room(compute_to_load_room), .count()
        );
    hc_token_queue #(.DEPTH(`HC_TOKEN_QUEUE_DEPTH), .COUNT_BITS(`HC_TOKEN_COUNT_BITS))
        compute_to_store (
            .clk(clk), .rst(datapath_rst), .push(compute_to_store_push),
            .pop(compute_to_store_pop), .has_token(compute_to_store_token),
            .has_room(compute_to_store_room), .count()
        );
    hc_token_queue #(.DEPTH(`HC_TOKEN_QUEUE_DEPTH), .COUNT_BITS(`HC_TOKEN_COUNT_BITS))
        store_to_compute (
            .clk(clk), .rst(datapath_rst), .push(store_to_compute_push),
            .pop(store_to_compute_pop), .has_token(store_to_compute_token),
            .has_room(store_to_compute_room), .count()
        );
    /* verilator lint_on PINCONNECTEMPTY */

    // --- on-chip buffers ------------------------------------------------------------------
    wire                           load_write_inp;
    wire                           load_write_wgt;
    wire [`HC_DMA_SRAM_BASE_W-1:0] load_write_addr;
    wire [7:0]                     load_write_beat;
    wire [`HC_BUS_BITS-1:0]        load_write_data;
    wire                           inp_read_en;
    wire [`HC_INP_IDX_BITS-1:0]    inp_read_addr;
    wire [`HC_INP_TILE_BITS-1:0]   inp_read_data;
    wire                           wgt_read_en;
    wire [`HC_WGT_IDX_BITS-1:0]    wgt_read_addr;
    wire [`HC_WGT_TILE_BITS-1:0]   wgt_read_data;
    wire [`HC_ACC_TILE_BEATS-1:0]  acc_write_en;
    wire [`HC_ACC_IDX_BITS-1:0]    acc_write_addr;
    wire [`HC_ACC_TILE_BITS-1:0]   acc_write_data;
    wire                           acc_dst_read_en;
    wire [`HC_ACC_IDX_BITS-1:0]    acc_dst_read_addr;
    wire [`HC_ACC_TILE_BITS-1:0]   acc_dst_read_data;
    wire                           acc_src_read_en;
    wire [`HC_ACC_IDX_BITS-1:0]    acc_src_read_addr;
    wire [`HC_ACC_TILE_BITS-1:0]   acc_src_read_data;
    wire                           acc_store_read_en;
    wire [`HC_ACC_IDX_BITS-1:0]    acc_store_read_addr;
    wire [`HC_ACC_TILE_BITS-1:0]   acc_store_read_data;

    hc_ram #(
        .BANKS(`HC_INP_TILE_BEATS), .BANK_BITS(`HC_BUS_BITS), .DEPTH(`HC_INP_DEPTH),
        .ADDR_BITS(`HC_INP_IDX_BITS), .READ_PORTS(1)
    ) inp_buffer (
        .clk(clk),
        .write_en(load_write_inp ? `HC_INP_TILE_BEATS'(1) << load_write_beat
                                 : {`HC_INP_TILE_BEATS{1'b0}}),
        .write_addr(load_write_addr[`HC_INP_IDX_BITS-1:0]),
        .write_data({`HC_INP_TILE_BEATS{load_write_data}}),
        .read_en(inp_read_en), .read_addr(inp_read_addr), .read_data(inp_read_data)
    );
    hc_ram #(
        .BANKS(`HC_WGT_TILE_BEATS), .BANK_BITS(`HC_BUS_BITS), .DEPTH(`HC_WGT_DEPTH),
        .ADDR_BITS(`HC_WGT_IDX_BITS), .READ_PORTS(1)
    ) wgt_buffer (
        .clk(clk),
        .write_en(load_write_wgt ? `HC_WGT_TILE_BEATS'(1) << load_write_beat
                                 : {`HC_WGT_TILE_BEATS{1'b0}}),
        .write_addr(load_write_addr[`HC_WGT_IDX_BITS-1:0]),
        .write_data({`HC_WGT_TILE_BEATS{load_write_data}}),
        .read_en(wgt_read_en), .read_addr(wgt_read_addr), .read_data(wgt_read_data)
    );
    hc_ram #(
        .BANKS(`HC_ACC_TILE_BEATS), .BANK_BITS(`HC_BUS_BITS), .DEPTH(`HC_ACC_DEPTH),
        .ADDR_BITS(`HC_ACC_IDX_BITS), .READ_PORTS(3)
    ) acc_buffer (
        .clk(clk),
        .write_en(acc_write_en), .write_addr(acc_write_addr), .write_data(acc_write_data),
        .read_en({acc_store_read_en, acc_src_read_en, acc_dst_read_en}),
        .read_addr({acc_store_read_addr, acc_src_read_addr, acc_dst_read_addr}),
        .read_data({acc_store_read_data, acc_src_read_data, acc_dst_read_data})
    );

    // --- modules ------------------------------------------------------------------------
    hc_load load (
        .clk(clk), .rst(datapath_rst),
        .cmd(load_cmd), .cmd_empty(load_empty), .cmd_pop(load_pop),
        .from_compute_has_token(compute_to_load_token), .from_compute_pop(compute_to_load_pop),
        .to_compute_has_room(load_to_compute_room), .to_compute_push(load_to_compute_push),
        .retired(retired_load),
        .ar_addr(read_ar_addr[1*32 +: 32]),
        .ar_len(read_ar_len[1*8 +: 8]), .ar_valid(read_ar_valid[1]),
        .ar_ready(read_ar_ready[1]), .r_data(read_r_data), .r_valid(read_r_valid[1]),
        .r_ready(read_r_ready[1]),
        .write_inp(load_write_inp), .write_wgt(load_write_wgt), .write_addr(load_write_addr),
        .write_beat(load_write_beat), .write_data(load_write_data)
    );

    hc_compute compute (
        .clk(clk), .rst(datapath_rst),
        .cmd(compute_cmd), .cmd_empty(compute_empty), .cmd_pop(compute_pop),
        .from_load_has_token(load_to_compute_token), .from_load_pop(load_to_compute_pop),
        .from_store_has_token(store_to_compute_token), .from_store_pop(store_to_compute_pop),
        .to_load_has_room(compute_to_load_room), .to_load_push(compute_to_load_push),
        .to_store_has_room(compute_to_store_room), .to_store_push(compute_to_store_push),
        .retired(retired_compute), .finished(finished),
        .ar_addr(read_ar_addr[0 +: 32]),
        .ar_len(read_ar_len[0 +: 8]), .ar_valid(read_ar_valid[0]),
        .ar_ready(read_ar_ready[0]), .r_data(read_r_data), .r_valid(read_r_valid[0]),
        .r_ready(read_r_ready[0]),
        .inp_read_en(inp_read_en), .inp_read_addr(inp_read_addr), .inp_read_data(inp_read_data),
        .wgt_read_en(wgt_read_en), .wgt_read_addr(wgt_read_addr), .wgt_read_data(wgt_read_data),
        .acc_write_en(acc_write_en), .acc_write_addr(acc_write_addr),
        .acc_write_data(acc_write_data),
        .acc_dst_read_en(acc_dst_read_en), .acc_dst_read_addr(acc_dst_read_addr),
        .acc_dst_read_data(acc_dst_read_data),
        .acc_src_read_en(acc_src_read_en), .acc_src_read_addr(acc_src_read_addr),
        .acc_src_read_data(acc_src_read_data)
    );

    hc_store store (
        .clk(clk), .rst(datapath_rst),
        .cmd(store_cmd), .cmd_empty(store_empty), .cmd_pop(store_pop),
        .from_compute_has_token(compute_to_store_token), .from_compute_pop(compute_to_store_pop),
        .to_compute_has_room(store_to_compute_room), .to_compute_push(store_to_compute_push),
        .retired(retired_store),
        .acc_read_en(acc_store_read_en), .acc_read_addr(acc_store_read_addr),
        .acc_read_data(acc_store_read_data),
        .aw_addr(m_axi_awaddr), .aw_len(m_axi_awlen), .aw_valid(m_axi_awvalid),
        .aw_ready(m_axi_awready), .w_data(m_axi_wdata), .w_last(m_axi_wlast),
        .w_valid(m_axi_wvalid), .w_ready(m_axi_wready), .b_valid(m_axi_bvalid),
        .b_ready(m_axi_bready)
    );
    // Protection bits, write strobes and IDs carry nothing this design needs: every
    // beat is full width and IDs are all 0. Only
    // the error bit of a response matters (SLVERR and DECERR both set bit 1).
    /* verilator lint_off UNUSEDSIGNAL */
    wire unused = &{1'b0, s_axil_awprot, s_axil_wstrb, s_axil_arprot, m_axi_bid, m_axi_rid,
                    m_axi_rresp[0], m_axi_bresp[0], load_write_addr[`HC_DMA_SRAM_BASE_W-1:0]};
    /* verilator lint_on UNUSEDSIGNAL */
endmodule

`default_nettype wire
