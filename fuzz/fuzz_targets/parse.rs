//! Any bytes: the parser never panics; what parses verifies (or not) without
//! panicking, schedules, and prints to text that parses back to the same text.

#![no_main]

use libfuzzer_sys::fuzz_target;
use popart_ir::text;

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else { return };
    let Ok(ir) = text::parse(s) else { return };
    let _ = ir.verify();
    for g in ir.graphs() {
        let _ = g.schedule();
    }
    let printed = text::to_text(&ir);
    match text::parse(&printed) {
        Ok(back) => assert_eq!(text::to_text(&back), printed),
        Err(e) => panic!("printed IR does not parse: {e}\n{printed}"),
    }
});
