//! Any bytes: the parser never panics; what parses verifies (or not) without
//! panicking, schedules, prints to text that parses back to the same text, and,
//! when valid, goes through the preparation pipeline (every pass verified)
//! without panicking or leaving an invalid IR.

#![no_main]

use libfuzzer_sys::fuzz_target;
use popart_ir::text;
use popart_transforms::pipeline::Pipeline;

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else { return };
    let Ok(mut ir) = text::parse(s) else { return };
    for g in ir.graphs() {
        let _ = g.schedule();
    }
    let printed = text::to_text(&ir);
    match text::parse(&printed) {
        Ok(back) => assert_eq!(text::to_text(&back), printed),
        Err(e) => panic!("printed IR does not parse: {e}\n{printed}"),
    }
    // `parse` verified it; a pass may fail with an error, never break the IR.
    if Pipeline::default().with_verify_each_pass(true).run(&mut ir).is_ok() {
        if let Err(e) = ir.verify() {
            panic!("prepared IR is invalid: {e}\n{printed}");
        }
    }
});
