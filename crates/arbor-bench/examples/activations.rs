//! Times arbor's fused sigmoid, tanh, GELU and ReLU on 4 M floats (`[512, 8192]`, uniform in
//! ±6), best of 5 rounds of 20 calls: `cargo run --release -p arbor-bench --example
//! activations` (`RAYON_NUM_THREADS=1` for one thread).
use burn::backend::flex::Flex;
use burn::tensor::{Distribution, Tensor};
fn main() {
    let dev = Default::default();
    let x = Tensor::<Flex, 2>::random([512, 8192], Distribution::Uniform(-6.0, 6.0), &dev);
    for (name, f) in [
        (
            "sigmoid",
            arbor_cells::kernels::sigmoid::<Flex, 2> as fn(_) -> _,
        ),
        ("tanh", arbor_cells::kernels::tanh::<Flex, 2>),
        ("gelu", arbor_cells::kernels::gelu::<Flex, 2>),
        ("relu", arbor_cells::kernels::relu::<Flex, 2>),
    ] {
        let _ = f(x.clone());
        let mut best = f64::MAX;
        for _ in 0..5 {
            let t = std::time::Instant::now();
            for _ in 0..20 {
                let _ = f(x.clone());
            }
            best = best.min(t.elapsed().as_secs_f64() / 20.0);
        }
        println!("{name}: {:.2} ms per 4M floats (best of 5)", best * 1e3);
    }
}
