#![forbid(unsafe_code)]

fn main() -> std::process::ExitCode {
    kube_anchor_modes::commands::main()
}
