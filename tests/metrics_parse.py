"""Parses a netrig `serve --metrics` answer read from stdin with the
prometheus-client parsers (tests/suite/metrics.rs): `openmetrics` or `prometheus`
as the only argument. Prints {"types": {family: type}, "samples":
{"name{k=\"v\",...}": value}} as JSON, labels sorted by name; a parse error
ends it with a traceback and a non-zero exit."""

import json
import sys

if sys.argv[1] == "openmetrics":
    from prometheus_client.openmetrics.parser import text_string_to_metric_families
else:
    from prometheus_client.parser import text_string_to_metric_families

types, samples = {}, {}
for fam in text_string_to_metric_families(sys.stdin.read()):
    types[fam.name] = fam.type
    for s in fam.samples:
        labels = ",".join(f'{k}="{v}"' for k, v in sorted(s.labels.items()))
        samples[f"{s.name}{{{labels}}}"] = s.value
json.dump({"types": types, "samples": samples}, sys.stdout)
