//! `nexbot-subagent`: the program inside every sandbox container.
//! Not built yet; see README "Status".

fn main() {
    eprintln!("nexbot-subagent: not implemented yet (see README, Status)");
    std::process::exit(2);
}
