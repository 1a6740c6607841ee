//! Times `arbor_cells::layer_norm` (the fused `arbor_kernels::layer_norm`) against Burn's
//! `LayerNorm::forward`, forward and forward+backward, best of 7 rounds of 5 calls:
//! `cargo run --release -p arbor-bench --example layer_norm_vs_burn`.
use burn::backend::{flex::Flex, Autodiff};
use burn::nn::LayerNormConfig;
use burn::tensor::{Distribution, Tensor};
type A = Autodiff<Flex>;
use arbor_bench::harness::best_of_rounds_ms as best;
fn main() {
    arbor_train::alloc::tune_for_cpu_tensors();
    let dev = Default::default();
    // R2D2's composition rows (n·4 positions, D 128) and the Transformer's (batch·time, D 256).
    for (rows, d) in [(3200, 128), (800, 128), (3200, 256)] {
        let norm = LayerNormConfig::new(d).init::<Flex>(&dev);
        let x = Tensor::<Flex, 2>::random([rows, d], Distribution::Default, &dev);
        let burn_f = best(|| {
            let _ = norm.forward(x.clone());
        });
        let ours_f = best(|| {
            let _ = arbor_cells::layer_norm(&norm, x.clone());
        });
        let norma = LayerNormConfig::new(d).init::<A>(&dev);
        let xa = Tensor::<A, 2>::random([rows, d], Distribution::Default, &dev).require_grad();
        let burn_b = best(|| {
            let _ = norma.forward(xa.clone()).sum().backward();
        });
        let ours_b = best(|| {
            let _ = arbor_cells::layer_norm(&norma, xa.clone()).sum().backward();
        });
        println!("{rows}x{d}: forward burn {burn_f:.3} ms ours {ours_f:.3} ms ({:.2}x) | fwd+bwd burn {burn_b:.3} ours {ours_b:.3} ({:.2}x)", burn_f / ours_f, burn_b / ours_b);
    }
}
