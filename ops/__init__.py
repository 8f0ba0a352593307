"""Operations on live hosts and exports: `doctor` (ops/doctor.py), `render` (ops/render.py).

Unlike `allocation/`, these modules may run processes and reach the network;
they take every container from the deployment records of `records.deployment`.
"""
