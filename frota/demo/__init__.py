"""``frota demo``: the main job on embedded defaults (the command is ``frota/commands/demo.py``).

``services`` starts and stops the real processes (Mosquitto, the collector, the agent) and writes
their configurations; ``player`` plays the scenario in a thread, paced against the demo; ``watch``
reads and shows live counts from the agent's buffer and the collector's database; ``report``
prints the summary and the findings of the trip.
"""
