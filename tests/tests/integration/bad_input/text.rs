//! The text form and loader: malformed IR texts, hostile headers, overflowing
//! numbers, bad data values. Every one is a typed `IrError` (`Parse` with the
//! line, or the verifier's error), never a panic.

use popart_ir::text::parse;
use popart_ir::IrError;

use super::harness::{case, ensure, Case, Category::Text};

const HEADER: &str = "ir num_host_transfers=1 replication_factor=1\n";

/// `HEADER`, `graph main`, then `body`.
fn main_with(body: &str) -> String {
    format!("{HEADER}graph main\n{body}")
}

pub fn cases() -> Vec<Case> {
    vec![
        case(Text, "empty_text", || expect_err!(parse(""), IrError::Parse { .. }, [])),
        case(Text, "missing_header", || expect_err!(parse("graph main\n"), IrError::Parse { line: 1, .. }, ["line 1"])),
        case(Text, "header_num_host_transfers_zero", || {
            expect_err!(
                parse("ir num_host_transfers=0 replication_factor=1\ngraph main\n"),
                IrError::Parse { .. },
                ["num_host_transfers"]
            )
        }),
        case(Text, "header_replication_factor_zero", || {
            expect_err!(
                parse("ir num_host_transfers=1 replication_factor=0\ngraph main\n"),
                IrError::Parse { .. },
                ["replication_factor"]
            )
        }),
        case(Text, "header_number_overflows_usize", || {
            expect_err!(
                parse("ir num_host_transfers=99999999999999999999999 replication_factor=1\ngraph main\n"),
                IrError::Parse { .. },
                ["line 1"]
            )
        }),
        case(Text, "header_negative_number", || {
            expect_err!(
                parse("ir num_host_transfers=-1 replication_factor=1\ngraph main\n"),
                IrError::Parse { .. },
                ["line 1"]
            )
        }),
        case(Text, "header_unknown_key", || {
            expect_err!(
                parse("ir num_host_transfers=1 replication_factor=1 turbo=9\ngraph main\n"),
                IrError::Parse { .. },
                ["turbo"]
            )
        }),
        case(Text, "header_duplicate_key", || {
            expect_err!(
                parse("ir num_host_transfers=1 num_host_transfers=2 replication_factor=1\ngraph main\n"),
                IrError::Parse { .. },
                ["num_host_transfers"]
            )
        }),
        case(Text, "tensor_dim_overflows_usize", || {
            expect_err!(
                parse(&main_with("  tensor x act float32[99999999999999999999999]\n")),
                IrError::Parse { line: 3, .. },
                ["line 3"]
            )
        }),
        case(Text, "tensor_negative_dim", || {
            expect_err!(parse(&main_with("  tensor x act float32[-1]\n")), IrError::Parse { line: 3, .. }, ["line 3"])
        }),
        case(Text, "tensor_bytes_overflow", || {
            expect_err!(
                parse(&main_with("  tensor x act float32[4294967296,4294967296]\n")),
                IrError::TensorTooLarge { .. } | IrError::Parse { .. },
                ["x"]
            )
        }),
        case(Text, "unknown_dtype", || {
            expect_err!(parse(&main_with("  tensor x act float33[2]\n")), IrError::Parse { line: 3, .. }, ["float33"])
        }),
        case(Text, "unknown_tensor_kind", || {
            expect_err!(parse(&main_with("  tensor x weird float32[2]\n")), IrError::Parse { line: 3, .. }, ["weird"])
        }),
        case(Text, "unknown_op_type", || {
            expect_err!(
                parse(&main_with("  tensor x act float32[2]\n  op o Frobnicate in[0=x] out[]\n")),
                IrError::Parse { line: 4, .. },
                ["Frobnicate"]
            )
        }),
        case(Text, "op_reads_unknown_tensor", || {
            expect_err!(
                parse(&main_with("  tensor y act float32[2]\n  op n Neg in[0=ghost] out[0=y]\n")),
                IrError::Parse { line: 4, .. },
                ["ghost"]
            )
        }),
        case(Text, "op_output_disagrees_with_inference", || {
            expect_err!(
                parse(&main_with(
                    "  tensor x var float32[2] = [1.0, 2.0]\n  tensor y act float32[3]\n  op n Neg in[0=x] out[0=y]\n"
                )),
                IrError::Parse { line: 5, .. },
                ["line 5"]
            )
        }),
        case(Text, "duplicate_tensor_name", || {
            expect_err!(
                parse(&main_with("  tensor x act float32[2]\n  tensor x act float32[2]\n")),
                IrError::Parse { line: 4, .. },
                ["x"]
            )
        }),
        case(Text, "variable_data_count_mismatch", || {
            expect_err!(
                parse(&main_with("  tensor w var float32[3] = [1.0, 2.0]\n")),
                IrError::Parse { line: 3, .. },
                ["line 3", "float32[3]"]
            )
        }),
        case(Text, "bool_value_2", || {
            expect_err!(
                parse(&main_with("  tensor b var bool[2] = [true, 2]\n")),
                IrError::Parse { line: 3, .. },
                ["line 3"]
            )
        }),
        case(Text, "bool_value_word", || {
            expect_err!(
                parse(&main_with("  tensor b var bool[1] = [maybe]\n")),
                IrError::Parse { line: 3, .. },
                ["maybe"]
            )
        }),
        case(Text, "int8_value_out_of_range", || {
            expect_err!(
                parse(&main_with("  tensor c const int8[1] = [300]\n")),
                IrError::Parse { line: 3, .. },
                ["300"]
            )
        }),
        case(Text, "uint32_negative_value", || {
            expect_err!(
                parse(&main_with("  tensor c const uint32[1] = [-1]\n")),
                IrError::Parse { line: 3, .. },
                ["-1"]
            )
        }),
        case(Text, "int64_value_overflows", || {
            expect_err!(
                parse(&main_with("  tensor c const int64[1] = [9223372036854775808]\n")),
                IrError::Parse { line: 3, .. },
                ["line 3"]
            )
        }),
        case(Text, "float_value_garbage", || {
            expect_err!(
                parse(&main_with("  tensor c const float32[1] = [1.0.0]\n")),
                IrError::Parse { line: 3, .. },
                ["line 3"]
            )
        }),
        case(Text, "int_attribute_overflows", || {
            expect_err!(
                parse(&main_with("  tensor x var float32[2] = [1.0, 2.0]\n  tensor y act float32[2]\n  op s Softmax {axis=99999999999999999999} in[0=x] out[0=y]\n")),
                IrError::Parse { line: 5, .. },
                ["line 5"]
            )
        }),
        case(Text, "attribute_axis_out_of_range", || {
            expect_err!(
                parse(&main_with("  tensor x var float32[2] = [1.0, 2.0]\n  tensor y act float32[2]\n  op s Softmax {axis=-9223372036854775808} in[0=x] out[0=y]\n")),
                IrError::Parse { .. } | IrError::Inference { .. },
                ["Softmax"]
            )
        }),
        case(Text, "unterminated_string", || {
            expect_err!(parse(&main_with("  tensor \"x act float32[2]\n")), IrError::Parse { line: 3, .. }, ["line 3"])
        }),
        case(Text, "bad_unicode_escape", || {
            expect_err!(
                parse(&main_with("  tensor \"\\u{110000}\" act float32[2]\n")),
                IrError::Parse { line: 3, .. },
                ["line 3"]
            )
        }),
        case(Text, "nul_and_control_characters", || {
            expect_err!(parse(&main_with("  tensor x\0 act float32[2]\n")), IrError::Parse { .. }, [])
        }),
        case(Text, "input_index_overflows_u32", || {
            expect_err!(
                parse(&main_with("  tensor x var float32[2] = [1.0, 2.0]\n  tensor y act float32[2]\n  op n Neg in[4294967296=x] out[0=y]\n")),
                IrError::Parse { line: 5, .. },
                ["line 5"]
            )
        }),
        case(Text, "topocon_cycle", || {
            expect_err!(
                parse(&main_with("  tensor x var float32[2] = [1.0, 2.0]\n  tensor y act float32[2]\n  tensor z act float32[2]\n  op a Neg in[0=x] out[0=y]\n  op b Neg in[0=y] out[0=z]\n  topocon b -> a\n")),
                IrError::Cycle { .. } | IrError::Parse { .. },
                ["a", "b"]
            )
        }),
        case(Text, "text_graph_calls_itself", || {
            let text = format!(
                "{HEADER}graph main\ngraph g\n  inputs [x]\n  outputs [y]\n  tensor x act float32[2]\n  tensor y act float32[2]\n  op c Call {{graph=@g}} in[0=x] out[0=y]\n"
            );
            expect_err!(parse(&text), IrError::RecursiveGraph(_) | IrError::Parse { .. } | IrError::Invalid(_), ["g"])
        }),
        case(Text, "call_of_unknown_graph", || {
            expect_err!(
                parse(&main_with("  tensor x var float32[2] = [1.0, 2.0]\n  tensor y act float32[2]\n  op c Call {graph=@nowhere} in[0=x] out[0=y]\n")),
                IrError::Parse { .. },
                ["nowhere"]
            )
        }),
        case(Text, "elided_data_is_refused", || {
            expect_err!(
                parse(&main_with("  tensor w var float32[100] = elided(100)\n")),
                IrError::Parse { line: 3, .. },
                ["line 3"]
            )
        }),
        case(Text, "deeply_repeated_lines_parse_linearly", || {
            // Many tensors: no quadratic blow-up or stack overflow (a smoke test, not a timing).
            let mut body = String::new();
            for i in 0..20_000 {
                body.push_str(&format!("  tensor t{i} act float32[1]\n"));
            }
            let ir = parse(&main_with(&body))?;
            ensure(ir.main_graph().num_tensors() == 20_000, || "tensors lost".into())
        }),
        case(Text, "round_trip_of_extreme_values", || {
            let text = main_with("  tensor c const float32[4] = [inf, -inf, NaN, -0.0]\n  tensor i const int64[2] = [-9223372036854775808, 9223372036854775807]\n");
            let ir = parse(&text)?;
            let again = parse(&popart_ir::text::to_text(&ir))?;
            ensure(popart_ir::text::to_text(&again) == popart_ir::text::to_text(&ir), || "round trip differs".into())
        }),
    ]
}
