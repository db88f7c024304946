// The AXI4-Lite control port. Register map (32-bit registers, byte offsets):
//   0x00 CONTROL      write 1 to bit 0: start (ignored while busy)
//   0x04 STATUS       bit 0 done, bit 1 busy, bit 2 a DRAM access returned an error
//   0x08 INSN_ADDR    byte address of the first instruction (16-byte aligned)
//   0x0C INSN_COUNT   instructions in the stream
//   0x10 CYCLES_LO    cycles from start to the completion of FINISH (low word)
//   0x14 CYCLES_HI    (high word)
//   0x18 CONFIG_ID    CRC-32 of the HardwareConfig name this RTL was built for
//   0x1C RETIRED      instructions completed since start
// `irq` follows STATUS.done: high from the completion of FINISH until the next start.
// hw/README.md documents it; accel_sim/rtl_device.py and fpga_device.py use it.
`default_nettype none
`include "hc_config.vh"

module hc_ctrl (
    input  wire        clk,
    input  wire        rst,
    // AXI4-Lite slave
    input  wire [7:0]  s_axil_awaddr,
    input  wire        s_axil_awvalid,
    output wire        s_axil_awready,
    input  wire [31:0] s_axil_wdata,
    input  wire        s_axil_wvalid,
    output wire        s_axil_wready,
    output wire [1:0]  s_axil_bresp,
    output reg         s_axil_bvalid,
    input  wire        s_axil_bready,
    input  wire [7:0]  s_axil_araddr,
    input  wire        s_axil_arvalid,
    output wire        s_axil_arready,
    output reg  [31:0] s_axil_rdata,
    output wire [1:0]  s_axil_rresp,
    output reg         s_axil_rvalid,
    input  wire        s_axil_rready,
    // to the accelerator
    output reg         start,
    output reg  [31:0] insn_addr,
    output reg  [31:0] insn_count,
    input  wire        finished,
    output wire        irq,
    input  wire        retired_load,
    input  wire        retired_compute,
    input  wire        retired_store,
    input  wire        bus_error
);
    reg        aw_held;
    reg [7:0]  aw_addr;
    reg        w_held;
    reg [31:0] w_data;
    reg        busy;
    reg        done;
    reg        error;
    reg [63:0] cycles;
    reg [31:0] retired;

    assign irq = done;
    assign s_axil_awready = !aw_held;
    assign s_axil_wready = !w_held;
    assign s_axil_bresp = 2'b00;
    assign s_axil_arready = !s_axil_rvalid;
    assign s_axil_rresp = 2'b00;

    wire do_write = aw_held && w_held && !s_axil_bvalid;
    // registers are 32-bit words at 0x00-0x1C: the other address bits select nothing
    /* verilator lint_off UNUSEDSIGNAL */
    wire unused_address_bits = &{1'b0, s_axil_araddr[7:5], s_axil_araddr[1:0],
                                 aw_addr[7:5], aw_addr[1:0]};
    /* verilator lint_on UNUSEDSIGNAL */

    always @(posedge clk) begin
        if (rst) begin
            aw_held <= 1'b0;
            w_held <= 1'b0;
            s_axil_bvalid <= 1'b0;
            s_axil_rvalid <= 1'b0;
            start <= 1'b0;
            busy <= 1'b0;
            done <= 1'b0;
            error <= 1'b0;
            cycles <= 64'd0;
            retired <= 32'd0;
            insn_addr <= 32'd0;
            insn_count <= 32'd0;
        end else begin
            start <= 1'b0;
            if (s_axil_awvalid && !aw_held) begin
                aw_held <= 1'b1;
                aw_addr <= s_axil_awaddr;
            end
            if (s_axil_wvalid && !w_held) begin
                w_held <= 1'b1;
                w_data <= s_axil_wdata;
            end
            if (do_write) begin
                aw_held <= 1'b0;
                w_held <= 1'b0;
                s_axil_bvalid <= 1'b1;
                case (aw_addr[4:2])
                    3'd0: if (w_data[0] && !busy) begin
                        start <= 1'b1;
                        busy <= 1'b1;
                        done <= 1'b0;
                        error <= 1'b0;
                        cycles <= 64'd0;
                        retired <= 32'd0;
                    end
                    3'd2: insn_addr <= w_data;
                    3'd3: insn_count <= w_data;
                    default: ;
                endcase
            end
            if (s_axil_bvalid && s_axil_bready) s_axil_bvalid <= 1'b0;

            if (s_axil_arvalid && !s_axil_rvalid) begin
                s_axil_rvalid <= 1'b1;
                case (s_axil_araddr[4:2])
                    3'd0: s_axil_rdata <= {31'd0, busy};
                    3'd1: s_axil_rdata <= {29'd0, error, busy, done};
                    3'd2: s_axil_rdata <= insn_addr;
                    3'd3: s_axil_rdata <= insn_count;
                    3'd4: s_axil_rdata <= cycles[31:0];
                    3'd5: s_axil_rdata <= cycles[63:32];
                    3'd6: s_axil_rdata <= `HC_CONFIG_ID;
                    default: s_axil_rdata <= retired;
                endcase
            end
            if (s_axil_rvalid && s_axil_rready) s_axil_rvalid <= 1'b0;

            if (busy) begin
                cycles <= cycles + 64'd1;
                retired <= retired + {31'd0, retired_load} + {31'd0, retired_compute}
                         + {31'd0, retired_store};
                if (finished) begin
                    busy <= 1'b0;
                    done <= 1'b1;
                end
                if (bus_error) error <= 1'b1;
            end
        end
    end
endmodule

`default_nettype wire
