// The issue rule every module follows (docs/isa.md section 4): the head command
// issues when each queue it pops holds a token and each queue it pushes has room.
// `prev`/`next` name the neighbouring modules; a module without one ties its
// inputs off (`*_ok` high).
`default_nettype none

module hc_issue (
    input  wire         cmd_valid,
    input  wire [3:0]   flags,      // pop_prev, pop_next, push_prev, push_next
    input  wire         idle,
    input  wire         prev_has_token,
    input  wire         next_has_token,
    input  wire         prev_has_room,
    input  wire         next_has_room,
    output wire         issue,
    output wire         pop_prev,
    output wire         pop_next
);
    wire wants_pop_prev = flags[0];
    wire wants_pop_next = flags[1];
    wire wants_push_prev = flags[2];
    wire wants_push_next = flags[3];

    assign issue = cmd_valid && idle
                && (!wants_pop_prev || prev_has_token) && (!wants_pop_next || next_has_token)
                && (!wants_push_prev || prev_has_room) && (!wants_push_next || next_has_room);
    assign pop_prev = issue && wants_pop_prev;
    assign pop_next = issue && wants_pop_next;
endmodule

`default_nettype wire
