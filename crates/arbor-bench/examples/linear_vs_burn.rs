//! Times `arbor_cells::linear_rows` (the fused `linear`) against Burn's `Linear::forward` on
//! matrices, forward and forward+backward, best of 7 rounds of 5 calls:
//! `cargo run --release -p arbor-bench --example linear_vs_burn`.
use burn::backend::{flex::Flex, Autodiff};
use burn::nn::LinearConfig;
use burn::tensor::{Distribution, Tensor};
type A = Autodiff<Flex>;
use arbor_bench::harness::best_of_rounds_ms as best;
fn main() {
    arbor_train::alloc::tune_for_cpu_tensors();
    let dev = Default::default();
    for (m, k, n, bias) in [
        (3840, 128, 1600, true),
        (128, 400, 1600, false),
        (2048, 256, 768, true),
        (2048, 1024, 256, true),
        (256, 600, 3000, true),
    ] {
        let lin = LinearConfig::new(k, n).with_bias(bias).init::<Flex>(&dev);
        let x = Tensor::<Flex, 2>::random([m, k], Distribution::Default, &dev);
        let burn_f = best(|| {
            let _ = lin.forward(x.clone());
        });
        let ours_f = best(|| {
            let _ = arbor_cells::linear_rows(&lin, x.clone());
        });
        let lina = LinearConfig::new(k, n).with_bias(bias).init::<A>(&dev);
        let xa = Tensor::<A, 2>::random([m, k], Distribution::Default, &dev).require_grad();
        let burn_b = best(|| {
            let _ = lina.forward(xa.clone()).sum().backward();
        });
        let ours_b = best(|| {
            let _ = arbor_cells::linear_rows(&lina, xa.clone()).sum().backward();
        });
        println!("{m}x{k}x{n} bias {bias}: forward burn {burn_f:.2} ms ours {ours_f:.2} ms ({:.2}x) | fwd+bwd burn {burn_b:.2} ours {ours_b:.2} ({:.2}x)", burn_f / ours_f, burn_b / ours_b);
    }
}
