//! Runs every recurrent cell of `arbor-cells` on a seeded random batch, on the device you pick,
//! and checks the result against the same weights on the CPU reference backend (`flex`).
//!
//! ```text
//! cargo run --release --example cells
//! cargo run --release --features cuda --example cells -- --device cuda
//! ```

use arbor::cells::names::VariantArray;
use arbor::cells::ArborBackend;
use std::time::Instant;

use anyhow::Result;
use arbor::burn::backend::Flex;
use arbor::burn::module::Module;
use arbor::burn::prelude::*;
use arbor::burn::record::{BinBytesRecorder, FullPrecisionSettings, Recorder};
use arbor::burn::tensor::TensorData;
use arbor::cells::{CellKind, RecurrentStack, RecurrentStackConfig};
use arbor::device::{run_on, BackendJob};
use clap::Parser;

/// Run the recurrent cells on a device and compare with the CPU.
#[derive(Parser, Debug)]
struct Args {
    /// Backend and device: auto (the first CUDA GPU when built with `cuda` and one answers, else
    /// the default CPU backend), flex, ndarray, cuda, cuda:N.
    #[arg(long, default_value = arbor::device::DEFAULT_DEVICE)]
    device: String,
    /// Cells to run (default: all).
    #[arg(long, value_delimiter = ',')]
    cells: Vec<CellKind>,
    /// Batch size.
    #[arg(long, default_value_t = 16)]
    batch: usize,
    /// Sequence length.
    #[arg(long, default_value_t = 20)]
    len: usize,
    /// Input width.
    #[arg(long, default_value_t = 64)]
    d_input: usize,
    /// Hidden width.
    #[arg(long, default_value_t = 128)]
    d_hidden: usize,
    /// Neurons per master-gate chunk.
    #[arg(long, default_value_t = 8)]
    chunk: usize,
    /// Layers.
    #[arg(long, default_value_t = 2)]
    layers: usize,
    /// Seed for the inputs.
    #[arg(long, default_value_t = 0)]
    seed: u64,
}

/// Seeded inputs and lengths (the second half of the batch is padded).
fn inputs(args: &Args) -> (Vec<f32>, Vec<usize>) {
    let n = args.batch * args.len * args.d_input;
    let mut state = args.seed.wrapping_mul(6364136223846793005).wrapping_add(1);
    let x = (0..n)
        .map(|_| {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((state >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect();
    let lengths = (0..args.batch)
        .map(|b| {
            if b < args.batch / 2 {
                args.len
            } else {
                1 + (b * 7) % args.len
            }
        })
        .collect();
    (x, lengths)
}

struct Report {
    outputs: Vec<f32>,
    distances: Vec<f32>,
    millis: f64,
}

/// Runs one stack whose weights come from `record` bytes.
struct RunCell<'a> {
    config: &'a RecurrentStackConfig,
    record: Vec<u8>,
    x: &'a [f32],
    lengths: &'a [usize],
    shape: [usize; 3],
}

impl BackendJob for RunCell<'_> {
    type Output = Result<Report>;

    fn run<B: ArborBackend>(self, device: B::Device) -> Result<Report> {
        let recorder = BinBytesRecorder::<FullPrecisionSettings>::default();
        let record = Recorder::<B>::load(&recorder, self.record, &device)?;
        let stack: RecurrentStack<B> = self.config.init(&device).load_record(record);
        let x = Tensor::<B, 3>::from_data(TensorData::new(self.x.to_vec(), self.shape), &device);
        let start = Instant::now();
        let out = stack.forward(x, Some(self.lengths), None);
        let outputs = out.outputs.into_data().convert::<f32>().to_vec::<f32>()?;
        let millis = start.elapsed().as_secs_f64() * 1e3;
        let distances = match out.distances.last() {
            Some(d) => d.clone().into_data().convert::<f32>().to_vec::<f32>()?,
            None => Vec::new(),
        };
        Ok(Report {
            outputs,
            distances,
            millis,
        })
    }
}

/// Checks every flag before any work, naming the flag and the rule (a zero size or a chunk
/// that does not divide the width would otherwise panic deep in a kernel).
fn check(args: &Args, cells: &[CellKind]) -> Result<()> {
    for (flag, v) in [("--batch", args.batch), ("--len", args.len)] {
        if v == 0 {
            anyhow::bail!("{flag} must be at least 1");
        }
    }
    // Each layer holds at least a d_hidden × (d_input + d_hidden) gate matrix (twice: the CPU
    // reference and the device copy); refused before allocating, which would abort.
    let (h, i) = (args.d_hidden as f64, args.d_input as f64);
    arbor::apps::cli::check_weights_fit(
        "--d-hidden/--d-input/--layers",
        h * (i + h) * args.layers as f64 / 2.0,
        &args.device,
    )?;
    for &kind in cells {
        RecurrentStackConfig::new(kind, args.d_input, args.d_hidden)
            .with_chunk_size(args.chunk)
            .with_n_layers(args.layers)
            .validate()
            .map_err(|e| {
                anyhow::anyhow!(
                    "invalid flags for {kind:?}: {}",
                    e.named(&[
                        ("d_input", "--d-input"),
                        ("d_hidden", "--d-hidden"),
                        ("chunk_size", "--chunk"),
                        ("n_layers", "--layers"),
                    ])
                )
            })?;
    }
    Ok(())
}

fn main() -> Result<()> {
    let args = Args::parse();
    let cells = if args.cells.is_empty() {
        CellKind::VARIANTS.to_vec()
    } else {
        args.cells.clone()
    };
    check(&args, &cells)?;
    let (x, lengths) = inputs(&args);
    let shape = [args.batch, args.len, args.d_input];
    println!(
        "batch {} × length {} (lengths {:?}), d_input {}, d_hidden {}, chunk {}, {} layers",
        args.batch, args.len, lengths, args.d_input, args.d_hidden, args.chunk, args.layers
    );
    println!(
        "{:<18} {:>12} {:>12} {:>14}  distances of sentence 0 (top layer)",
        "cell", "device ms", "flex ms", "max |diff|"
    );
    for kind in cells {
        let config = RecurrentStackConfig::new(kind, args.d_input, args.d_hidden)
            .with_chunk_size(args.chunk)
            .with_n_layers(args.layers);
        // Weights are drawn once on the CPU and loaded on both backends.
        let reference: RecurrentStack<Flex> = config.init(&Default::default());
        let recorder = BinBytesRecorder::<FullPrecisionSettings>::default();
        let bytes = Recorder::<Flex>::record(&recorder, reference.into_record(), ())?;
        let job = |record| RunCell {
            config: &config,
            record,
            x: &x,
            lengths: &lengths,
            shape,
        };
        let on_device = run_on(&args.device, job(bytes.clone()))??;
        let on_cpu = run_on("flex", job(bytes))??;
        let diff = on_device
            .outputs
            .iter()
            .zip(&on_cpu.outputs)
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        let d: Vec<String> = on_device
            .distances
            .iter()
            .take(args.len.min(10))
            .map(|v| format!("{v:.2}"))
            .collect();
        println!(
            "{:<18} {:>12.2} {:>12.2} {:>14.2e}  [{}]",
            kind.to_string(),
            on_device.millis,
            on_cpu.millis,
            diff,
            d.join(" ")
        );
        anyhow::ensure!(
            diff < 1e-3,
            "{kind}: {} disagrees with the CPU reference (max |diff| {diff})",
            args.device
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(flags: &[&str], needle: &str) {
        let args = Args::try_parse_from(["cells"].iter().chain(flags)).unwrap();
        let e = check(&args, CellKind::VARIANTS).unwrap_err().to_string();
        assert!(e.contains(needle), "{flags:?}: {e}");
    }

    /// The cases that panicked (zero sizes, a chunk not dividing the width) or aborted (a width
    /// whose weights cannot fit) are refused naming the flag.
    #[test]
    fn bad_sizes_are_refused_naming_the_flag() {
        refused(&["--len", "0"], "--len");
        refused(&["--batch", "0"], "--batch");
        refused(&["--d-hidden", "0"], "--d-hidden");
        refused(&["--d-input", "0"], "--d-input");
        refused(&["--layers", "0"], "--layers");
        refused(&["--chunk", "7"], "--chunk");
        refused(&["--chunk", "0"], "--chunk");
        refused(
            &["--device", "flex", "--d-hidden", "4000000000"],
            "--d-hidden",
        );
        let good = Args::try_parse_from(["cells"]).unwrap();
        check(&good, CellKind::VARIANTS).unwrap();
    }
}
