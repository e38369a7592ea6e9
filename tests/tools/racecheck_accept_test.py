#!/usr/bin/env python3
"""scripts/racecheck-accept on racecheck logs made here (no GPU needed).

The logs name the real source lines of this tree (found by their text, so
that edits to the templates do not break the test) in the report formats
compute-sanitizer prints. A race passes only when it is a listed site: the
two decode hazards racecheck reports on the Hopper decode kernel and the
stage ring's message handoff pass; the same functions at another line,
another function at the listed line, an unknown file, a failed test or a log
without races do not. Files moved to another folder still match.
"""
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

ROOT = os.environ.get("TAILOR_SOURCE_DIR") or os.path.dirname(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "scripts", "racecheck-accept")


def locate(name):
    """The path under ROOT of the template or runtime header `name`."""
    for top in ("templates", "runtime"):
        for folder, _, files in os.walk(os.path.join(ROOT, top)):
            if name in files:
                return os.path.relpath(os.path.join(folder, name), ROOT)
    raise AssertionError(f"no {name} under templates/ or runtime/")


def find(name, text, last=False):
    """(path, line) of the first (or last) line of `name` containing `text`."""
    path = locate(name)
    with open(os.path.join(ROOT, path)) as f:
        lines = [n for n, line in enumerate(f, 1) if text in line]
    if not lines:
        raise AssertionError(f"{text!r} not in {path}")
    return path, lines[-1] if last else lines[0]


KERNEL = ("void tailor::cuda::DecodeSm90Kernel<(tailor::cuda::Half16)0, 128, "
          "4, 16, 4>::")
MASK_WRITE = find("decode_sm90.cuh", "sh.masks[stage] = (")
# Consume's read of the mask: the last of the two (ConsumeHeads has the first).
MASK_READ = find("decode_sm90.cuh", "sh.masks[stage] >> (16 * warp)", last=True)
WARP_TILE = find("decode_sm90.cuh",
                 "p, k_tile, k_tile + kLayout.tile_bytes, q_rows")
QUERY_READ = find("decode_common.cuh", "(stage_rows + offset)")
BULK = find("bulk_copy.cuh", '"l"(GlobalAddress(global_src))')
MESSAGE_WRITE = find("pipeline.cuh", "ring.message[c.stage] = message;")
MESSAGE_READ = find("pipeline.cuh", "return ring.message[c.stage];")


def access(kind, function, where, style="inline"):
    path, line = where
    if style == "address":  # older releases: address, then file:line:func
        return f"{kind} access at 0x00000170 in {path}:{line}:{function}(...)"
    return f"{kind} access at {function}(...)+0x150 in {path}:{line}"


def report(first, *others, style="inline"):
    """One report in the layout compute-sanitizer prints."""
    if style == "split":  # newer releases: each location on its own line
        lines = []
        for i, (kind, function, where) in enumerate((first,) + others):
            path, line = where
            head = "Error: Race reported between" if i == 0 else "and"
            lines.append(f"========= {head} {kind} access at")
            lines.append(f"=========     {function}(...)+0x1b0 in {path}:{line}")
        lines.append("=========     [29504 hazards]")
        return "\n".join(lines)
    text = "========= Error: Race reported between " + access(*first,
                                                            style=style)
    for other in others:
        text += "\n=========     and " + access(*other, style=style) + \
                " [29504 hazards]"
    return text


def log(*reports, failed=False):
    body = ["========= COMPUTE-SANITIZER", "[==========] 3 tests ran."]
    for r in reports:
        body += [r, "========="]
    body.append(f"========= RACECHECK SUMMARY: {len(reports)} hazards "
                f"displayed ({len(reports)} errors, 0 warnings)")
    body.append("[  FAILED  ] 1 test" if failed else "[  PASSED  ] 3 tests.")
    return "\n".join(body) + "\n"


DECODE_MASKS = report(("Write", KERNEL + "LoadTile", MASK_WRITE),
                      ("Read", KERNEL + "Consume", MASK_READ))
DECODE_QUERY = report(
    ("Write", "void tailor::cuda::BulkLoad", BULK),
    ("Read", "void tailor::cuda::DecodeCopyQuery<128>", QUERY_READ))
HANDOFF = report(
    ("Write", "void tailor::cuda::ArmFull<4, int>", MESSAGE_WRITE),
    ("Read", "int tailor::cuda::Message<4, int>", MESSAGE_READ))


class RacecheckAcceptTest(unittest.TestCase):

    def run_script(self, text, root=ROOT):
        with tempfile.NamedTemporaryFile("w", suffix=".log",
                                         delete=False) as f:
            f.write(text)
        try:
            done = subprocess.run(
                [sys.executable, SCRIPT, f.name, "--root", root,
                 "--sites", os.path.join(
                     ROOT, "tests/sanitizers/racecheck_ordered_sites.txt")],
                capture_output=True, text=True)
        finally:
            os.unlink(f.name)
        return done.returncode, done.stdout

    def test_the_reported_decode_hazards_are_proven_sites(self):
        for style in ("inline", "split", "address"):
            masks = report(("Write", KERNEL + "LoadTile", MASK_WRITE),
                           ("Read", KERNEL + "Consume", MASK_READ),
                           style=style)
            code, out = self.run_script(log(masks, DECODE_QUERY, HANDOFF))
            self.assertEqual(code, 0, style + "\n" + out)
            self.assertIn("ordered by full[stage] (RAW), empty[stage] (WAR)",
                          out)
            self.assertIn("ordered by full[s] (RAW), empty[s] (WAR)", out)

    def test_either_order_and_several_partners(self):
        both = report(("Read", KERNEL + "Consume", MASK_READ),
                      ("Write", KERNEL + "LoadTile", MASK_WRITE),
                      ("Write", KERNEL + "LoadTile", MASK_WRITE))
        self.assertEqual(self.run_script(log(both))[0], 0)

    def test_another_access_of_the_same_functions_is_not_accepted(self):
        other_line = report(("Write", KERNEL + "LoadTile", MASK_WRITE),
                            ("Read", KERNEL + "Consume", WARP_TILE))
        code, out = self.run_script(log(DECODE_MASKS, other_line))
        self.assertEqual(code, 1, out)
        self.assertIn("NOT ACCEPTED: Write in " + KERNEL + "LoadTile", out)

    def test_another_function_at_the_listed_line_is_not_accepted(self):
        wrong = report(("Write", KERNEL + "Produce", MASK_WRITE),
                       ("Read", KERNEL + "Consume", MASK_READ))
        self.assertEqual(self.run_script(log(wrong))[0], 1)
        unknown = report(("Write", "void f", ("templates/cuda/x.cuh", 3)),
                         ("Read", "void g", ("templates/cuda/x.cuh", 4)))
        code, out = self.run_script(log(unknown))
        self.assertEqual(code, 1)
        self.assertIn("source not found", out)

    def test_failed_tests_and_logs_without_races_fail(self):
        self.assertEqual(self.run_script(log(DECODE_MASKS, failed=True))[0], 1)
        code, out = self.run_script(log())
        self.assertEqual(code, 1)
        self.assertIn("no race reported", out)

    def test_files_moved_to_another_folder_still_match(self):
        with tempfile.TemporaryDirectory() as tree:
            for folder in ("templates", "runtime"):
                shutil.copytree(os.path.join(ROOT, folder),
                                os.path.join(tree, folder))
            moved = os.path.join(tree, "templates/cuda/elsewhere")
            os.makedirs(moved)
            for where in (MASK_WRITE, QUERY_READ):
                shutil.move(os.path.join(tree, where[0]), moved)
            at = lambda where: ("templates/cuda/elsewhere/" +
                                os.path.basename(where[0]), where[1])
            masks = report(("Write", KERNEL + "LoadTile", at(MASK_WRITE)),
                           ("Read", KERNEL + "Consume", at(MASK_READ)))
            query = report(
                ("Write", "void tailor::cuda::BulkLoad", BULK),
                ("Read", "void tailor::cuda::DecodeCopyQuery<128>",
                 at(QUERY_READ)))
            code, out = self.run_script(log(masks, query), root=tree)
            self.assertEqual(code, 0, out)
            # A report naming the old place still finds the file by name.
            code, out = self.run_script(log(DECODE_MASKS), root=tree)
            self.assertEqual(code, 0, out)

if __name__ == "__main__":
    unittest.main()
