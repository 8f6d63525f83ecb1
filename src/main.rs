fn main() -> std::process::ExitCode {
    kube_anchor::commands::main()
}
