# SPDX-License-Identifier: MIT
"""The Python binding (bindings/python/nvfence.py) over libnvfence's C API
and the testing kit's C face: a failover of two simulated hosts through
the C API's own fence and writer handles, the errors, the keys, the
binding's ctypes structs against the C header's layout, and README.md's
example (section "Python").

Run by CTest (python_binding) as /usr/bin/python3 -m unittest with
NVFENCE_LIB (the built libnvfence.so), NVFENCE_TESTING_LIB (the built
libnvfence_testing_ffi.so) and CC (for the layout check).
"""
import ctypes
import os
import pathlib
import re
import subprocess
import sys
import tempfile
import unittest

SRC = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(SRC / "bindings" / "python"))

import nvfence  # noqa: E402

BLOCK = 4096


class FailoverTest(unittest.TestCase):
    """Host 0 takes over and writes; host 1 takes over; host 0's next write
    is fenced and its writer settles."""

    def setUp(self):
        self.c = nvfence.SimCluster(hosts=2)
        self.addCleanup(self.c.close)

    def test_failover_fences_the_old_holder(self):
        c = self.c
        self.assertEqual(c.size, 2)
        f0, f1 = c.fence(0), c.fence(1)

        o = f0.takeover()
        self.assertTrue(o.changed)
        self.assertEqual(o.holder_after, o.key)
        mine = nvfence.key_decode(o.key)
        self.assertEqual((mine.tag, mine.node), (1, 1))

        st = f0.report()
        self.assertEqual(st.holder_key, o.key)
        holder = [r for r in st.registrants if r.holder]
        self.assertEqual(len(holder), 1)
        self.assertTrue(holder[0].is_self)
        self.assertEqual(holder[0].fields.node, 1)

        w = c.writer(0, epoch=mine.epoch)
        self.assertEqual(w.epoch, mine.epoch)
        done = w.write(0, b"A" * BLOCK)
        self.assertEqual(done.status, nvfence.IO_OK)
        self.assertEqual(done.bytes, BLOCK)
        self.assertEqual(c.writes_landed, 1)
        self.assertFalse(w.fenced)
        self.assertFalse(w.settled)

        o1 = f1.takeover()
        self.assertEqual(o1.previous_holder, o.key)
        self.assertEqual(nvfence.key_decode(o1.key).node, 2)

        with self.assertRaises(nvfence.FencedError) as e:
            w.write(1, b"B" * BLOCK)
        self.assertTrue(nvfence.is_fenced(e.exception.code))
        self.assertEqual(e.exception.message, nvfence.strerror(e.exception.code))
        self.assertEqual(c.writes_refused, 1)
        self.assertEqual(c.writes_landed, 1)
        self.assertTrue(w.fenced)
        self.assertTrue(w.settled)

        st = f0.report()
        self.assertEqual(st.holder_key, o1.key)
        holder = [r for r in st.registrants if r.holder]
        self.assertEqual([(r.fields.node, r.is_self) for r in holder], [(2, False)])
        self.assertNotIn(o.key, [r.key for r in st.registrants])

        # Latched: the writer refuses every later write without the device.
        with self.assertRaises(nvfence.FencedError):
            w.write(2, b"C" * BLOCK)
        self.assertEqual(c.writes_refused, 1)

    def test_reaped_completion_carries_the_fenced_status(self):
        f0, f1 = self.c.fence(0), self.c.fence(1)
        f0.takeover()
        w = self.c.writer(0)
        f1.takeover()
        ud = w.queue_write(0, b"D" * BLOCK)
        self.assertEqual(w.submit(), 1)
        (done,) = w.reap(4, 1)
        self.assertEqual((done.user_data, done.status), (ud, nvfence.IO_FENCED))
        self.assertTrue(nvfence.is_fenced(done.error))
        self.assertEqual(w.in_flight, 0)
        self.assertTrue(w.settled)

    def test_sim_clock_and_bad_host(self):
        before = self.c.now_us
        self.c.advance(1500)
        self.assertEqual(self.c.now_us, before + 1500)
        with self.assertRaises(nvfence.Error) as e:
            self.c.fence(2)
        self.assertFalse(isinstance(e.exception, nvfence.FencedError))
        self.assertEqual(e.exception.code, -6)  # NVF_ERRC_INVALID_ARGUMENT
        with self.assertRaises(nvfence.Error):
            nvfence.SimCluster(hosts=0)


class LibraryTest(unittest.TestCase):
    def test_version_and_errors(self):
        self.assertRegex(nvfence.version(), r"^\d+\.\d+\.\d+$")
        self.assertTrue(nvfence.is_fenced(-17))  # NVF_ERRC_FENCED
        self.assertTrue(nvfence.is_fenced(-(0x1000 + 0x83)))  # Reservation Conflict
        self.assertFalse(nvfence.is_fenced(-6))
        self.assertEqual(nvfence.strerror(0), "success")
        self.assertIsInstance(nvfence._error(-17), nvfence.FencedError)
        self.assertNotIsInstance(nvfence._error(-6), nvfence.FencedError)

    def test_keys(self):
        k = nvfence.key_make(7, 3, 42)
        self.assertEqual(nvfence.key_decode(k), nvfence.KeyFields(7, 3, 42))
        self.assertEqual(nvfence.key_format(k), "nf:7:3:42")
        self.assertEqual(nvfence.key_parse("nf:7:3:42"), k)
        with self.assertRaises(nvfence.Error) as e:
            nvfence.key_make(0, 0, 1)
        self.assertEqual(e.exception.code, -6)
        with self.assertRaises(nvfence.Error) as e:
            nvfence.key_decode(0x1234)
        self.assertEqual(e.exception.code, -7)  # NVF_ERRC_INVALID_KEY

    def test_ns_open_refuses_a_regular_file(self):
        with tempfile.NamedTemporaryFile() as f:
            with self.assertRaises(nvfence.Error) as e:
                nvfence.Namespace(f.name)
        self.assertEqual(e.exception.code, -2)  # NVF_ERRC_NOT_NVME
        with self.assertRaises(nvfence.Error) as e:
            nvfence.Namespace("/nonexistent/nvme9n9")
        self.assertEqual(e.exception.code, -1)  # NVF_ERRC_NOT_FOUND


STRUCTS = {
    "nvf_key_fields": nvfence._KeyFields, "nvf_registrant": nvfence._Registrant,
    "nvf_resv_status": nvfence._ResvStatus, "nvf_fence_options": nvfence._FenceOptions,
    "nvf_outcome": nvfence._Outcome, "nvf_writer_options": nvfence._WriterOptions,
    "nvf_completion": nvfence._Completion, "nvf_ns_info": nvfence._NsInfo,
}


class LayoutTest(unittest.TestCase):
    """Every ctypes struct has the C struct's size and every field its offset."""

    def test_structs_match_the_header(self):
        cc = os.environ.get("CC")
        if not cc:
            self.skipTest("CC not set")
        lines, expect = [], []
        for cname, st in STRUCTS.items():
            lines.append(f'printf("%zu\\n", sizeof({cname}));')
            expect.append(ctypes.sizeof(st))
            for fname, _ in st._fields_:
                lines.append(f'printf("%zu\\n", offsetof({cname}, {fname}));')
                expect.append(getattr(st, fname).offset)
        code = ("#include <stddef.h>\n#include <stdio.h>\n#include <nvfence/nvfence.h>\n"
                "int main(void) {\n" + "\n".join(lines) + "\nreturn 0;\n}\n")
        with tempfile.TemporaryDirectory() as d:
            src, exe = pathlib.Path(d) / "layout.c", pathlib.Path(d) / "layout"
            src.write_text(code)
            subprocess.run([cc, "-std=c11", "-I", str(SRC / "include"), str(src), "-o", str(exe)], check=True)
            got = [int(x) for x in subprocess.run([str(exe)], check=True, capture_output=True,
                                                  text=True).stdout.split()]
        self.assertEqual(got, expect)


class ReadmeExampleTest(unittest.TestCase):
    """README.md's Python example runs as written."""

    def test_readme_example_runs(self):
        text = (SRC / "README.md").read_text()
        section = text.split("\n### Python\n", 1)[1].split("\n### ", 1)[0]
        blocks = re.findall(r"^```python\n(.*?)^```", section, re.M | re.S)
        self.assertEqual(len(blocks), 1, "README.md's section Python has one python block")
        exec(compile(blocks[0], "README.md (Python)", "exec"), {})


if __name__ == "__main__":
    unittest.main()
