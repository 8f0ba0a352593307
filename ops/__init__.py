"""What reaches live hosts: `doctor` (ops/doctor/), the model folders `profile` reads (ops/models.py),
the SSH runner (ops/ssh.py), and the parsers of what hosts answer (npu-smi, frames, bounded JSON).

Unlike `allocation/`, these modules may run processes and reach the network; they take every
container from the deployment records of `records.deployment`. An output written from the plan
alone (a file format, a script) is a view: it goes in `views/exports/`, not here.
"""
