//! `cargo run -p levee-sim --example series -- FILE FROM_S TO_S`: per-bucket
//! upstream requests, answered and successful requests of each variant, for
//! looking at a run's shape in a terminal.
fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (Some(file), from, to) = (
        args.get(1),
        args.get(2)
            .and_then(|s| s.parse::<f64>().ok())
            .unwrap_or(0.0),
        args.get(3)
            .and_then(|s| s.parse::<f64>().ok())
            .unwrap_or(f64::MAX),
    ) else {
        eprintln!("usage: series FILE [FROM_S] [TO_S]");
        std::process::exit(2);
    };
    let sc = match levee_sim::Scenario::load(std::path::Path::new(file)) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(1);
        }
    };
    let r = levee_sim::simulate(&sc, levee_sim::DEFAULT_SEED);
    for v in &r.variants {
        eprintln!(
            "{}: {} events, {} requests, provider queue peak {}, pool queue peak {}",
            v.name,
            v.detail.events,
            v.detail.requests,
            v.detail.provider_peak_queue,
            v.detail.pool_peak_queue
        );
    }
    let w = sc.resolution.as_secs_f64();
    print!("{:>8}", "t");
    for v in &r.variants {
        print!(" | {:>22}", v.name);
    }
    println!();
    let n = r.variants[0].detail.upstream.len();
    for i in 0..n {
        let t = i as f64 * w;
        if t < from || t > to {
            continue;
        }
        print!("{t:>8.1}");
        for v in &r.variants {
            let d = &v.detail;
            print!(
                " | {:>7} {:>6} {:>7}",
                d.upstream[i], d.completed[i], d.succeeded[i]
            );
        }
        println!();
    }
}
