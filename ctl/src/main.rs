//! `nexbot-ctl`: the operator's client of the daemon's control API (`subagents ps`, …).
//! Not built yet; see README "Status".

fn main() {
    eprintln!("nexbot-ctl: the control client is not implemented yet (see README, Status)");
    std::process::exit(2);
}
