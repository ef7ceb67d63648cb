#!/bin/sh
# NVIDIA's image starts the exporter through this script (/usr/bin/ and /usr/local/dcgm/);
# a manifest whose `command:` names it gets the same process here.
exec /usr/bin/dcgm-exporter "$@"
