// The ALU's arithmetic on one accumulator tile, element-wise (docs/isa.md section 5).
// Comparisons use the wider of the accumulator and the 16-bit immediate, because
// the ISA compares against the immediate before wrapping; results wrap to acc_bits.
// MUL with a tensor operand shifts its exact 2*acc_bits-bit product right by imm
// (arithmetic) before wrapping; with an immediate operand it shifts by 0.
// LUT replaces each element by the table entry its low 8 bits select, sign-extended.
//
// Sized for the xc7z020 (docs/fpga.md): each lane's product is two DSPs and a
// 32 x 8 logic multiply (hc_alu_product), its table a LUTRAM copy (hc_alu_table),
// and one 2*acc_bits-bit arithmetic right shifter serves MUL and both directions of
// SHR: x >> d shifts sign-extended x by d, x << d shifts {x, acc_bits zeros} right
// by acc_bits - d and keeps the low acc_bits.
`default_nettype none
`include "hc_config.vh"

module hc_alu (
    input  wire [2:0]                   op,
    input  wire                         use_imm,
    input  wire [15:0]                  imm,
    input  wire                         clk,
    // a word of the lookup table (four entries), written into every lane's copy
    input  wire                         table_write,
    input  wire [5:0]                   table_word,
    input  wire [31:0]                  table_data,
    input  wire [`HC_ACC_TILE_BITS-1:0] x_tile,
    input  wire [`HC_ACC_TILE_BITS-1:0] y_tile,
    output wire [`HC_ACC_TILE_BITS-1:0] result
);
    localparam integer AB = `HC_ACC_BITS;
    localparam integer OPW = AB > 16 ? AB : 16;
    localparam integer ELEMENTS = `HC_BATCH * `HC_BLOCK_OUT;
    localparam integer SHIFT_BITS = $clog2(AB);
    localparam [2:0] OP_MIN = 3'd0;
    localparam [2:0] OP_MAX = 3'd1;
    localparam [2:0] OP_ADD = 3'd2;
    localparam [2:0] OP_SHR = 3'd3;
    localparam [2:0] OP_LUT = 3'd7;
    localparam [OPW:0] MAX_SHIFT = AB - 1;
    localparam integer PW = 2 * AB;
    localparam integer PRODUCT_SHIFT_BITS = $clog2(PW);

    wire signed [OPW-1:0] wide_imm = {{(OPW-16){imm[15]}}, imm};

    genvar e;
    generate
        for (e = 0; e < ELEMENTS; e = e + 1) begin : g_element
            wire signed [AB-1:0] x = x_tile[e*AB +: AB];
            wire signed [OPW-1:0] wide_x = {{(OPW-AB){x[AB-1]}}, x};
            wire signed [OPW-1:0] wide_y = use_imm ? wide_imm
                : {{(OPW-AB){y_tile[e*AB + AB - 1]}}, y_tile[e*AB +: AB]};
            // |y| in one more bit, so that the most negative operand negates exactly
            wire [OPW:0] magnitude = wide_y[OPW-1] ? -{wide_y[OPW-1], wide_y}
                                                   : {1'b0, wide_y};
            wire [SHIFT_BITS-1:0] distance = magnitude > MAX_SHIFT ? MAX_SHIFT[SHIFT_BITS-1:0]
                                                                   : magnitude[SHIFT_BITS-1:0];
            wire [OPW-1:0] sum = wide_x + wide_y;
            wire signed [AB-1:0] low_y = wide_y[AB-1:0];
            // the checker keeps a tensor MUL's imm in [0, 2*acc_bits - 1]
            wire [PRODUCT_SHIFT_BITS-1:0] product_shift =
                use_imm ? {PRODUCT_SHIFT_BITS{1'b0}} : imm[PRODUCT_SHIFT_BITS-1:0];
            wire signed [PW-1:0] full_product;
            hc_alu_product #(.AB(AB)) multiply (.x(x), .y(low_y), .product(full_product));
            // the one shifter: MUL's product, or x for SHR (left: negative operand)
            wire shift_left = wide_y[OPW-1];
            wire signed [PW-1:0] shift_in = op != OP_SHR ? full_product
                : shift_left ? {x, {AB{1'b0}}} : PW'(x);
            wire [PRODUCT_SHIFT_BITS-1:0] shift_amount = op != OP_SHR ? product_shift
                : shift_left ? PRODUCT_SHIFT_BITS'(AB - {1'b0, distance})
                             : PRODUCT_SHIFT_BITS'(distance);
            // the shifted value wrapped to the accumulator width (its high bits are
            // dropped, as the ISA specifies)
            wire [AB-1:0] shifted = AB'(shift_in >>> shift_amount);
            wire [7:0] entry;
            hc_alu_table table_copy (
                .clk(clk), .write(table_write), .write_word(table_word),
                .write_data(table_data), .index(x[7:0]), .entry(entry));
            reg  [AB-1:0] value;
            always @* begin
                case (op)
                    OP_MIN: value = wide_x < wide_y ? x : wide_y[AB-1:0];
                    OP_MAX: value = wide_x > wide_y ? x : wide_y[AB-1:0];
                    OP_ADD: value = sum[AB-1:0];
                    OP_SHR: value = shifted;
                    OP_LUT: value = {{(AB-8){entry[7]}}, entry};
                    default: value = shifted;
                endcase
            end
            assign result[e*AB +: AB] = value;
        end
    endgenerate
endmodule

`default_nettype wire
