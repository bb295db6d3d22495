"""Messages of the session-13 checks on bootstrapped targets that cross episode ends (English)."""

MESSAGES = {
    "terminal.unused":
        "the TD target ({text}) never uses the replay batch's done flags {name}, unpacked from the batch and "
        "converted but read nowhere: {ends} of the batch's {total} transitions are terminal and their targets "
        "still bootstrap from the next state's value",
    "terminal.unused.cause":
        "a terminal transition has no next state of the same episode: its target is the reward alone. Without the "
        "(1 - done) mask on the bootstrap term, r + gamma * max Q(s') pulls the value of episode-ending states up "
        "to that of ordinary states and the value scale climbs toward 1 / (1 - gamma)",
    "terminal.unused.next":
        "multiply the bootstrap term by the done mask: target = rewards + gamma * (1 - dones) * max_next_q "
        "(use the terminated flags, not time-limit truncations)",
    "terminal.carry":
        "{name} is carried backward through the rollout ({text}) without the done mask the loop applies to "
        "another term: the rollout holds {ends} episode ends among {total} steps, and at each the running sum of "
        "the next episode flows into the ending one",
    "terminal.carry.cause":
        "a return or a GAE advantage is a sum over one episode: at a step whose done flag is set the recursion must "
        "restart (gae = delta + gamma * lam * (1 - done) * gae). Masking only the bootstrap value keeps the carried "
        "sum, so the last steps of an episode are credited with the next episode's rewards and the critic is "
        "regressed on returns that cross episode boundaries",
    "terminal.carry.next":
        "multiply the carried term by the step's not-done mask (gae = gae * gamma * lam * (1 - done)), or reset it "
        "to 0 when the step ends an episode",
}
