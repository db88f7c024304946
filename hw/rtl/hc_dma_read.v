// The LOAD engine (one in the load module, one in the compute module): it reads
// the rows of a 2-D strided DRAM block over AXI and writes the padded block of
// SRAM entries in order, one bus beat per cycle, padding beats in between: every
// element of an INP padding tile holds `pad_value` (sign-extended to the input
// width); the padding of every other buffer is zero.
//
// Address requests run ahead of the data (each row split into short bursts that
// never cross 4 KiB, hc_burst_gen) so that rows stream back to back. Tiles are whole
// beats; micro-op and lookup-table words are 4 bytes and may start in the middle of
// a beat, so in
// word mode the engine writes one word per cycle and picks it from its lane.
`default_nettype none
`include "hc_config.vh"

module hc_dma_read (
    input  wire                           clk,
    input  wire                           rst,
    // command: the fields of a LOAD instruction, sampled when `start` is high
    input  wire                           start,
    input  wire [2:0]                     buffer,
    input  wire [`HC_DMA_SRAM_BASE_W-1:0] sram_base,
    input  wire [31:0]                    dram_base,
    input  wire [15:0]                    y_size,
    input  wire [15:0]                    x_size,
    input  wire [15:0]                    x_stride,
    input  wire [3:0]                     y_pad_top,
    input  wire [3:0]                     y_pad_bottom,
    input  wire [3:0]                     x_pad_left,
    input  wire [3:0]                     x_pad_right,
    input  wire [7:0]                     pad_value,
    output reg                            busy,
    output reg                            done,
    // AXI read channels (through the arbiter)
    output wire [31:0]                    ar_addr,
    output wire [7:0]                     ar_len,
    output wire                           ar_valid,
    input  wire                           ar_ready,
    input  wire [`HC_BUS_BITS-1:0]        r_data,
    input  wire                           r_valid,
    output wire                           r_ready,
    // SRAM writes: one beat of entry `write_addr`
    output wire                           write_valid,
    output wire [`HC_DMA_SRAM_BASE_W-1:0] write_addr,
    output wire [7:0]                     write_beat,
    output wire [`HC_BUS_BITS-1:0]        write_data
);
    localparam integer LOG_BUS = `HC_LOG_BUS_BYTES;
    localparam integer LANE_BITS = `HC_LOG_BUS_BYTES - 2;
    localparam [2:0] BUF_UOP = 3'd0;
    localparam [2:0] BUF_INP = 3'd1;
    localparam [2:0] BUF_WGT = 3'd2;
    localparam [2:0] BUF_LUT = 3'd5;

    // log2 of the bytes of one DRAM element of `kind`
    function [3:0] log_unit_bytes(input [2:0] kind);
        case (kind)
            BUF_UOP, BUF_LUT: log_unit_bytes = `HC_UOP_LOG_UNIT_BYTES;
            BUF_INP: log_unit_bytes = `HC_INP_LOG_UNIT_BYTES;
            BUF_WGT: log_unit_bytes = `HC_WGT_LOG_UNIT_BYTES;
            default: log_unit_bytes = `HC_ACC_LOG_UNIT_BYTES;
        endcase
    endfunction

    // --- latched command --------------------------------------------------------
    reg                           word_mode;
    reg [3:0]                     log_tile_beats;
    reg [16:0]                    rows;
    reg [16:0]                    cols;
    reg [16:0]                    data_row_begin;
    reg [16:0]                    data_row_end;
    reg [16:0]                    data_col_begin;
    reg [16:0]                    data_col_end;
    reg [31:0]                    stride_bytes;
    reg [`HC_BUS_BITS-1:0]        pad_beat;

    // --- SRAM write side ----------------------------------------------------------
    reg                           writing;
    reg [16:0]                    row;
    reg [16:0]                    col;
    reg [7:0]                     beat;
    reg [`HC_DMA_SRAM_BASE_W-1:0] entry;
    reg [31:0]                    data_row_byte;
    reg [LANE_BITS-1:0]           lane_q;

    wire [3:0]  start_log_unit = log_unit_bytes(buffer);
    // the lookup table is loaded in 4-byte words, as micro-ops are
    wire        start_word_mode = buffer == BUF_UOP || buffer == BUF_LUT;
    wire [3:0]  start_log_beats = start_word_mode ? 4'd0 : start_log_unit - LOG_BUS[3:0];
    wire [31:0] start_row_byte = dram_base << start_log_unit;
    wire [16:0] start_rows = {13'd0, y_pad_top} + {1'b0, y_size} + {13'd0, y_pad_bottom};
    wire [16:0] start_cols = {13'd0, x_pad_left} + {1'b0, x_size} + {13'd0, x_pad_right};
    // one input element holding pad_value, and a bus beat of them
    wire [`HC_INP_BITS-1:0] pad_element = `HC_INP_BITS'($signed(pad_value));
    wire [`HC_BUS_BITS-1:0] start_pad_beat = buffer == BUF_INP
        ? {(`HC_BUS_BITS / `HC_INP_BITS){pad_element}} : {`HC_BUS_BITS{1'b0}};

    wire row_has_data = row >= data_row_begin && row < data_row_end;
    wire in_data = writing && row_has_data && col >= data_col_begin && col < data_col_end;
    wire [LANE_BITS-1:0] lane =
        col == data_col_begin ? data_row_byte[LOG_BUS-1:2] : lane_q;
    wire last_word_of_beat = &lane || col == data_col_end - 17'd1;
    wire last_beat_of_entry = word_mode || beat == (8'd1 << log_tile_beats) - 8'd1;
    wire write_fire = writing && (!in_data || r_valid);

    wire [8:0] burst_beats;
    assign ar_len = 8'(burst_beats - 9'd1);

    hc_burst_gen requests (
        .clk(clk), .rst(rst), .start(start && !busy),
        .word_mode(start_word_mode), .log_tile_beats(start_log_beats),
        .first_byte(start_row_byte), .stride_bytes({16'd0, x_stride} << start_log_unit),
        .rows(y_size), .elements(x_size),
        .valid(ar_valid), .addr(ar_addr), .beats(burst_beats), .accept(ar_ready)
    );
    assign r_ready = in_data && (!word_mode || last_word_of_beat);
    assign write_valid = write_fire;
    assign write_addr = entry;
    assign write_beat = beat;
    assign write_data = !in_data ? pad_beat
                      : word_mode ? {{(`HC_BUS_BITS-32){1'b0}}, r_data[lane*32 +: 32]}
                      : r_data;

    always @(posedge clk) begin
        if (rst) begin
            busy <= 1'b0;
            done <= 1'b0;
            writing <= 1'b0;
        end else begin
            done <= 1'b0;
            if (start && !busy) begin
                word_mode <= start_word_mode;
                log_tile_beats <= start_log_beats;
                rows <= start_rows;
                cols <= start_cols;
                data_row_begin <= {13'd0, y_pad_top};
                data_row_end <= {13'd0, y_pad_top} + {1'b0, y_size};
                data_col_begin <= {13'd0, x_pad_left};
                data_col_end <= {13'd0, x_pad_left} + {1'b0, x_size};
                stride_bytes <= {16'd0, x_stride} << start_log_unit;
                pad_beat <= start_pad_beat;
                busy <= 1'b1;
                writing <= start_rows != 17'd0 && start_cols != 17'd0;
                row <= 17'd0;
                col <= 17'd0;
                beat <= 8'd0;
                entry <= sram_base;
                data_row_byte <= start_row_byte;
                lane_q <= {LANE_BITS{1'b0}};
            end

            // write side: entries in order, data beats as they arrive
            if (busy && !writing && !(start && !busy)) begin
                busy <= 1'b0;
                done <= 1'b1;
            end
            if (write_fire) begin
                if (in_data && word_mode) lane_q <= lane + 1'b1;
                if (last_beat_of_entry) begin
                    beat <= 8'd0;
                    entry <= entry + 1'b1;
                    if (col == cols - 17'd1) begin
                        col <= 17'd0;
                        row <= row + 17'd1;
                        if (row_has_data) data_row_byte <= data_row_byte + stride_bytes;
                        if (row == rows - 17'd1) writing <= 1'b0;
                    end else begin
                        col <= col + 17'd1;
                    end
                end else begin
                    beat <= beat + 8'd1;
                end
            end
        end
    end
endmodule

`default_nettype wire
