"""Renders a Helm chart with the Helm engine of helm-python-sdk (no helm binary installs here).

    helm-render.py CHART VALUES NAME NAMESPACE           JSON {template path: rendered YAML}
    helm-render.py --manifests CHART VALUES NAME NAMESPACE
                                                          the plain manifests: one file per
                                                          template that renders an object, as
                                                          JSON {file name: YAML}
    helm-render.py --overlay CHART BASE OVERLAY NAME NAMESPACE
                                                          a kustomize overlay of the plain
                                                          manifests of values BASE: those of
                                                          values OVERLAY that are new
                                                          (resources) or differ (patches), as
                                                          JSON {files, resources, patches}
    helm-render.py --lint CHART VALUES NAMESPACE         helm lint --strict's findings (JSON);
                                                          exit 1 on an error

VALUES is a JSON file, or a YAML file when its name ends in .yaml (read as `helm -f` reads it).
Run with the interpreter of .ci/helm-venv.sh; used by tests/it/chart.rs and
deploy/kubernetes/generate.sh. A render error is printed on stderr with exit status 2.
"""
import json
import os
import sys

from helm_python.chart import Chart, lint, values_from_yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def header(values_file):
    values = os.path.relpath(os.path.abspath(values_file), ROOT)
    return (
        "# Generated from deploy/helm/magnum-capi by deploy/kubernetes/generate.sh "
        f"(values: {values}); do not edit.\n"
    )


def read_values(path):
    with open(path) as f:
        text = f.read()
    return values_from_yaml(text) if path.endswith(".yaml") else json.loads(text)


def render(chart, values, name, namespace):
    with Chart.load(chart) as c:
        return c.render(values=values, name=name, namespace=namespace, is_install=True)


def manifests(rendered, values_file):
    """templates/x.yaml → x.yaml, for the templates that render something."""
    out = {}
    for path, text in sorted(rendered.items()):
        base = os.path.basename(path)
        if not base.endswith(".yaml") or "/templates/" not in path:
            continue
        body = text.strip("\n")
        if not any(
            line.strip() and not line.lstrip().startswith("#") and line.strip() != "---"
            for line in body.splitlines()
        ):
            continue
        out[base] = header(values_file) + body + "\n"
    return out


def overlay(chart, base_values, overlay_values, name, namespace):
    """The files of `overlay_values`' manifests that are not `base_values`' (header aside)."""
    base = manifests(render(chart, read_values(base_values), name, namespace), base_values)
    over = manifests(render(chart, read_values(overlay_values), name, namespace), overlay_values)

    def body(text):
        return text.split("\n", 1)[1]

    files = {n: t for n, t in over.items() if n not in base or body(base[n]) != body(t)}
    return {
        "files": files,
        "resources": sorted(n for n in files if n not in base),
        "patches": sorted(n for n in files if n in base),
    }


def main(argv):
    if argv[1] == "--overlay":
        try:
            json.dump(overlay(*argv[2:7]), sys.stdout)
        except Exception as e:  # the engine's message is the useful part
            print(f"{type(e).__name__}: {e}", file=sys.stderr)
            return 2
        return 0
    if argv[1] == "--lint":
        report = lint(argv[2], read_values(argv[3]), strict=True, namespace=argv[4])
        json.dump(report, sys.stdout)
        return 1 if report.get("errors") else 0
    split = argv[1] == "--manifests"
    chart, values_file, name, namespace = argv[2:6] if split else argv[1:5]
    try:
        out = render(chart, read_values(values_file), name, namespace)
    except Exception as e:  # the engine's message is the useful part
        print(f"{type(e).__name__}: {e}", file=sys.stderr)
        return 2
    json.dump(manifests(out, values_file) if split else out, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
