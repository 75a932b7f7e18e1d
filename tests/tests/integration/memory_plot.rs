//! `Executable::memory_plot` (issue 37, part 4): the memory report as an SVG,
//! parsed back as XML; the plotted points are checked against live bytes per
//! step computed here from the plan's buffers and lifetimes, and the
//! `ipu_model` chart against the model's program points.

use popart_lower::{BufferKind, Executable};
use popxl::{ops, Ir};
use popxl_session::Session;

/// A chain with activations of different sizes and lifetimes.
fn executable() -> Executable {
    let ir = Ir::new();
    {
        let _g = ir.main_graph().enter();
        let xs = popxl::h2d_stream([64, 32], popxl::float32, "x").unwrap();
        let ys = popxl::d2h_stream([64, 64], popxl::float32, "y").unwrap();
        let w = popxl::variable(ndarray::Array2::<f32>::from_elem((32, 64), 0.1), "w").unwrap();
        let x = ops::host_load(&xs, "x").unwrap();
        let a = ops::matmul(&x, &w).unwrap();
        let b = ops::relu(&a).unwrap();
        let c = ops::matmul(&ops::transpose(&b, &[1, 0]).unwrap(), &b).unwrap();
        let d = ops::matmul(&b, &c).unwrap();
        let e = &d + &b;
        ops::host_store(&ys, &e).unwrap();
    }
    let session = Session::new(ir, "cpu").unwrap();
    session.executable().clone()
}

/// Live activation bytes at each step: a naive sweep over every step and buffer.
fn naive_live(exe: &Executable) -> Vec<u64> {
    let lives = |b: &popart_lower::Buffer| exe.live_intervals(b.id);
    let steps = exe.buffers.iter().flat_map(|b| lives(b).iter()).map(|&(_, e)| e + 1).max().unwrap_or(0);
    (0..steps)
        .map(|t| {
            exe.buffers
                .iter()
                .filter(|b| b.kind == BufferKind::Activation && lives(b).iter().any(|&(s, e)| s <= t && t <= e))
                .map(|b| b.size as u64)
                .sum()
        })
        .collect()
}

/// A chart's plotted values, read back from its points through its plot
/// area's scale, and the largest error one pixel rounding (0.01) allows.
fn plotted(doc: &roxmltree::Document, chart: &str) -> (Vec<f64>, f64) {
    let g = doc.descendants().find(|n| n.attribute("id") == Some(chart)).unwrap_or_else(|| panic!("no chart {chart}"));
    let area = g.descendants().find(|n| n.attribute("class") == Some("plot-area")).unwrap();
    let f = |k: &str| area.attribute(k).unwrap().parse::<f64>().unwrap();
    let (left, top, width, height, steps, y_max) =
        (f("x"), f("y"), f("width"), f("height"), f("data-x-max"), f("data-y-max"));
    let line = g.descendants().find(|n| n.attribute("class") == Some("series")).unwrap();
    let mut values = Vec::new();
    for (i, p) in line.attribute("points").unwrap().split_whitespace().enumerate() {
        let (x, y) = p.split_once(',').unwrap();
        let (x, y): (f64, f64) = (x.parse().unwrap(), y.parse().unwrap());
        // Point i sits at the middle of step i.
        assert!((x - (left + (i as f64 + 0.5) / steps * width)).abs() < 0.01, "point {i} at x {x}");
        values.push((top + height - y) / height * y_max);
    }
    (values, 0.01 / height * y_max)
}

#[test]
fn the_plot_shows_the_live_bytes_of_every_step() {
    let exe = executable();
    let report = exe.memory_report();
    let live = naive_live(&exe);
    assert!(live.len() > 4 && report.peak_live_bytes > 0);
    assert_eq!(exe.live_bytes_per_step(), live);
    let svg = exe.memory_plot(None);
    let doc = roxmltree::Document::parse(&svg).expect("well-formed XML");
    assert_eq!(doc.root_element().tag_name().name(), "svg");
    let (values, tol) = plotted(&doc, "live");
    assert_eq!(values.len() as u64, report.steps);
    for (i, (&v, &want)) in values.iter().zip(&live).enumerate() {
        assert!((v - want as f64).abs() <= tol, "step {i}: plotted {v}, live {want}");
    }
    // The highest point is the report's peak, marked at its step.
    let (top_step, top) =
        values.iter().enumerate().fold((0, f64::MIN), |a, (i, &v)| if v > a.1 + tol { (i, v) } else { a });
    assert!((top - report.peak_live_bytes as f64).abs() <= tol);
    assert_eq!(top_step as u64, report.peak_step);
    let mark = doc.descendants().find(|n| n.attribute("class") == Some("peak")).unwrap();
    assert_eq!(mark.attribute("data-step"), Some(report.peak_step.to_string().as_str()));
    assert_eq!(mark.attribute("data-bytes"), Some(report.peak_live_bytes.to_string().as_str()));
    assert!(doc.descendants().all(|n| n.attribute("id") != Some("tile")));
}

#[test]
fn on_ipu_model_the_plot_adds_the_most_loaded_tile_of_every_step() {
    let exe = executable();
    let model = popart_lower::ipu_model::estimate(&exe, &Default::default()).unwrap().memory;
    let doc_text = exe.memory_plot(Some(&model));
    let doc = roxmltree::Document::parse(&doc_text).expect("well-formed XML");
    let (values, tol) = plotted(&doc, "tile");
    assert_eq!(values.len() as u64, model.steps);
    // Each program point's most loaded tile, held until the next point.
    for (i, p) in model.points.iter().enumerate() {
        let end = model.points.get(i + 1).map_or(model.steps, |q| q.step);
        for t in p.step..end.min(model.steps) {
            let v = values[t as usize];
            assert!((v - p.max_tile_bytes as f64).abs() <= tol, "step {t}: plotted {v}, tile {}", p.max_tile_bytes);
        }
    }
    let top = values.iter().cloned().fold(f64::MIN, f64::max);
    assert!((top - model.peak.max_tile_bytes as f64).abs() <= tol);
    let limit = doc.descendants().find(|n| n.attribute("class") == Some("limit")).unwrap();
    let area = doc.descendants().filter(|n| n.attribute("class") == Some("plot-area")).nth(1).unwrap();
    let f = |k: &str| area.attribute(k).unwrap().parse::<f64>().unwrap();
    let y: f64 = limit.attribute("y1").unwrap().parse().unwrap();
    let at = (f("y") + f("height") - y) / f("height") * f("data-y-max");
    assert!((at - model.tile_memory_bytes as f64).abs() <= tol * 2.0, "{at}");
}
