// The AXI bursts of a 2-D transfer: `rows` rows of `elements` elements, the first
// at byte `first_byte`, row starts `stride_bytes` apart. Each row is split into
// bursts of at most MAX_BEATS beats that never cross a 4 KiB boundary. The current
// burst is presented while `valid` is high; `accept` moves to the next one, which
// is valid in the following cycle, so bursts can go back to back.
//
// In word mode (micro-ops) elements are 4-byte words and a row covers every beat
// its words touch; otherwise an element is 2**log_tile_beats whole beats.
//
// MAX_BEATS (at most 256, AXI4's limit) bounds a burst below that: short bursts
// let the read arbiter interleave the transfers of different modules finely.
`default_nettype none
`include "hc_config.vh"

module hc_burst_gen #(
    parameter integer MAX_BEATS = 16
) (
    input  wire        clk,
    input  wire        rst,
    input  wire        start,
    input  wire        word_mode,
    input  wire [3:0]  log_tile_beats,
    input  wire [31:0] first_byte,
    input  wire [31:0] stride_bytes,
    input  wire [15:0] rows,
    input  wire [15:0] elements,
    output wire        valid,
    output wire [31:0] addr,
    output wire [8:0]  beats,
    input  wire        accept
);
    localparam integer LOG_BUS = `HC_LOG_BUS_BYTES;

    // beats of one row whose first byte lies `offset` bytes into a beat
    function [23:0] row_beats(input words, input [LOG_BUS-1:0] offset, input [15:0] count,
                              input [3:0] log_beats);
        reg [23:0] row_bytes;
        begin
            row_bytes = {6'd0, count, 2'd0} + {{(24-LOG_BUS){1'b0}}, offset};
            row_beats = words ? (row_bytes + `HC_BUS_BYTES - 1) >> LOG_BUS
                              : {8'd0, count} << log_beats;
        end
    endfunction

    reg        active;
    reg        word_mode_q;
    reg [3:0]  log_tile_beats_q;
    reg [15:0] elements_q;
    reg [31:0] stride_q;
    reg [15:0] rows_left;
    reg [31:0] row_byte;
    reg [31:0] burst_addr;
    reg [23:0] beats_left;

    wire [12:0] to_boundary = 13'(({1'b0, 12'hfff} - {1'b0, burst_addr[11:0]} + 13'd1) >> LOG_BUS);
    localparam [12:0] MAX = MAX_BEATS[12:0];
    wire [23:0] cap = {11'd0, to_boundary < MAX ? to_boundary : MAX};
    wire [23:0] burst = beats_left < cap ? beats_left : cap;
    wire [31:0] next_row_byte = row_byte + stride_q;

    assign valid = active;
    assign addr = burst_addr;
    assign beats = burst[8:0];

    always @(posedge clk) begin
        if (rst) begin
            active <= 1'b0;
        end else if (start) begin
            active <= rows != 0 && elements != 0;
            word_mode_q <= word_mode;
            log_tile_beats_q <= log_tile_beats;
            elements_q <= elements;
            stride_q <= stride_bytes;
            rows_left <= rows;
            row_byte <= first_byte;
            burst_addr <= {first_byte[31:LOG_BUS], {LOG_BUS{1'b0}}};
            beats_left <= row_beats(word_mode, first_byte[LOG_BUS-1:0], elements, log_tile_beats);
        end else if (active && accept) begin
            if (beats_left == burst) begin
                if (rows_left == 16'd1) begin
                    active <= 1'b0;
                end else begin
                    rows_left <= rows_left - 16'd1;
                    row_byte <= next_row_byte;
                    burst_addr <= {next_row_byte[31:LOG_BUS], {LOG_BUS{1'b0}}};
                    beats_left <= row_beats(word_mode_q, next_row_byte[LOG_BUS-1:0], elements_q,
                                            log_tile_beats_q);
                end
            end else begin
                burst_addr <= burst_addr + {8'd0, burst[23-LOG_BUS:0], {LOG_BUS{1'b0}}};
                beats_left <= beats_left - burst;
            end
        end
    end
endmodule

`default_nettype wire
