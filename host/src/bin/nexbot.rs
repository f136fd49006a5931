//! `nexbot`: the host daemon (`serve`), the terminal channel (`chat`), `init`, `doctor`,
//! `secrets rotate-key`, `images push`; the program is `nexbot_host::cli`.

fn main() {
    nexbot_host::cli::main();
}
