"""The bus's devices as processes on pseudo-terminals, and whole trips played on them.

How the pieces fit (reuse them for every device)::

    simulators.clock   DeviceClock protocol; ScaledClock(start_ms, scale) — the device clock runs
                       `scale` times real time (ms since the Unix epoch, UTC), .set(ms) for a clock
                       set; ManualClock(start_ms).advance(ms) for players that step time themselves.
    simulators.noise   NoiseConfig(ber, drop, garbage, burst, unplug_every_s, unplug_for_s, seed);
                       Noise(config).apply(chunk) -> (wire bytes, intact) — garbage goes *before*
                       the chunk, bit errors/drops *inside* it; next_unplug_in_s() schedules unplugs.
    simulators.pty     PtyPort(link=None, baud=115200): .open() -> path (raw pty; `link` symlinked
                       to the slave, re-pointed on replug), .write(bytes) paced at the baud rate,
                       .read() -> what the reader sent (never blocks), .unplug() (reader sees a
                       hangup), .close() (also removes the link), .fileno() for select.
    simulators.runner  Emission(data, label); DeviceModel protocol — name, next_due_ms(),
                       due(now_ms) -> [Emission], receive(bytes, now_ms) -> [Emission]: a model
                       holds state and builds bytes, does no I/O and reads no clock.
                       Station(model, port, noise, sent_log, announce) runs one model on one pty
                       (cable unplug/replug included); Runner([stations], clock).open(), .run(
                       until_ms, on_step), .step(now_ms), .stopping = True to stop, .close().
                       SentLog(stream): one JSON line per chunk {device, ms, label, sent, intact,
                       hex}, so a test knows what went out intact.
    simulators.cli     add_line_arguments(parser) (--link --baud --sent-log --time-scale --start
                       --duration --ber --drop --garbage --burst --unplug-every --unplug-for
                       --seed); serve(args, model_factory) runs one model like `frota sim` does
                       (prints the tty path on stdout, stops on SIGINT/SIGTERM or --duration);
                       run_stations(stations, clock, duration_s) for several devices at once.

    simulators.registrador  RegistradorModel(start_ms, rate_hz, first_seq, memory) — the
                       tachograph: set_speed, set_ignition, insert_card, withdraw_card,
                       set_activity, device_event, trip, incident, power_off/power_on (each takes
                       the device time), history(request_id, first, last, now_ms); frames come
                       out of due()/receive() with their frame number as the Emission label
                       (history answers: "history N", "history end"). DefaultDrive(model,
                       start_ms).step(now_ms) plays a plausible day when run alone.

A device simulator module (e.g. ``simulators.registrador``) holds the model class and
``register_sim(subparsers)``, which adds ``frota sim <device>`` (use ``add_line_arguments`` and
``serve``), and the device's entry in ``protocols/registry.py`` names it. A line-based
device (NMEA) emits one Emission per sentence; a request/response device (RS-485) returns
``None`` from ``next_due_ms`` and answers in ``receive``. A scenario player builds the models
itself, drives their state from its timeline (``on_step`` or its own loop calling ``step``) and
runs them together with ``run_stations``.
"""
