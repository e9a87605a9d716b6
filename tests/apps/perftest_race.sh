# Sourced by the apps tests that run perftest: the two failures of
# perftest's own that a run on a loaded machine may show, each recognised
# by its message.  A test retries only those (at most CM_RACE_TRIES
# attempts in all); the case must then pass, and one that keeps failing
# fails.
#
# perftest's own race with -R: after the rdma_cm exchange's last message
# the client connects the test QP at once, while the server still waits
# for that message's ACK before it listens; when the server's receive
# path lags (a loaded machine), the REQ finds no listener and is rejected
# "invalid service ID" (8), as Linux does, and perftest's retry then uses
# the ids it has just destroyed and crashes.  Seen in about one -R run in
# 20 under load (capture: ACK and REQ in the same receive burst).
readonly CM_RACE_SIGN="RDMA_CM_EVENT_REJECTED; error: 8"
readonly CM_RACE_TRIES=3
readonly CM_RACE_REASON="perftest -R startup race (REQ before the server's listen: REJ 8, then perftest's retry crashes)"
# perftest's own clock: it estimates the CPU frequency from a linear fit of
# cycles against time, and on a loaded machine the fit can fail; it then
# says so and prints "inf" in a latency row.  That measurement (not the
# transfer) is retried the same way, and must then succeed.
readonly CLOCK_SIGN="Correlation coefficient r^2: "
readonly CLOCK_REASON="perftest's cycle-clock estimate failed under load (r^2 < 0.9, an 'inf' row)"
