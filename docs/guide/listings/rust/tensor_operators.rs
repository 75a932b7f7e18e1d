// Tensor operators with tensors and scalars (numpy broadcasting), numpy-style indexing,
// and the ops behind them, checked against the same arithmetic done with ndarray.
use ndarray::{array, s as nd, Array2};
use popxl::{ops, s, HostArray, Ir, SliceIndex};
use popxl_session::{Inputs, Session};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let a_data: Array2<f32> = array![[1.0, -2.0, 3.0], [4.0, 5.0, -6.0]];
    let b_data = array![0.5f32, 2.0, -1.0];

    let ir = Ir::new();
    let _main = ir.main_graph().enter();
    let a = popxl::constant(a_data.clone(), "a")?;
    let b = popxl::constant(b_data.clone(), "b")?;

    let mixed = &(&(&a * &b) - 1.0) / 2.0; // (a * b - 1) / 2, b broadcast over rows
    let rows = a.index(&s![1])?; // a[1]
    let reversed = a.index(&s![.., SliceIndex::from(..).step(-1)])?; // a[:, ::-1]
    let picked = a.index(&popxl::constant(vec![1i32, 0, 1], "rows")?)?; // a[[1, 0, 1]]
    let positive = ops::relu(&a)?.matmul(&a.t()?)?; // relu(a) @ a.T
    let is_big = a.greater(&popxl::constant(2.0f32, "two")?)?; // a > 2

    let mut streams = Vec::new();
    for (t, name) in [(&mixed, "mixed"), (&rows, "rows"), (&reversed, "reversed"), (&picked, "picked")]
        .into_iter()
        .chain([(&positive, "positive"), (&is_big, "is_big")])
    {
        let stream = popxl::d2h_stream(t.shape(), t.dtype(), name)?;
        ops::host_store(&stream, t)?;
        streams.push(stream);
    }
    drop(_main);

    let mut session = Session::new(ir, "cpu")?;
    let out = session.enter()?.run(&Inputs::new())?;
    let expected = [
        HostArray::from((&a_data * &b_data - 1.0) / 2.0),
        HostArray::from(a_data.row(1).to_owned()),
        HostArray::from(a_data.slice(nd![.., ..;-1]).to_owned()),
        HostArray::from(ndarray::stack![ndarray::Axis(0), a_data.row(1), a_data.row(0), a_data.row(1)]),
        HostArray::from(a_data.mapv(|x| x.max(0.0)).dot(&a_data.t())),
        HostArray::from(a_data.mapv(|x| x > 2.0)),
    ];
    for (stream, want) in streams.iter().zip(expected) {
        assert_eq!(out[stream], want, "{}", stream.name());
    }
    Ok(())
}
