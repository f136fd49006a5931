//! `nexbot`: the host daemon (`serve`), the terminal channel (`chat`), `init` and `doctor`.
//! Not built yet; see README "Status".

fn main() {
    eprintln!("nexbot: the host daemon is not implemented yet (see README, Status)");
    std::process::exit(2);
}
