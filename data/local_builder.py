"""The base of the TFDS builders whose data this machine makes (SCAN from its grammar, the docstring corpus),
and `prepared`, which builds them safely: one process at a time (another waits, then reads the data built),
what a build killed midway left removed, and a full disk named by the data's own directory.

Its log is one line of ours, where TFDS would announce "Downloading and preparing dataset Unknown size" and
draw progress bars, whose terminal escapes clutter a log file."""
import glob
import os
import shutil
import sys

import tensorflow_datasets as tfds

from runtime import atomic, locks


class LocalBuilder(tfds.core.GeneratorBasedBuilder, skip_registration=True):

    def download_and_prepare(self, **kwargs) -> None:
        tfds.display_progress_bar(sys.stderr.isatty())  # TFDS's bars go to stderr
        super().download_and_prepare(**kwargs)

    def _log_download_bytes(self) -> None:  # TFDS calls it once, when it starts to build
        print(f"building dataset {self.info.full_name} in {self.data_dir_root} (once; later runs read it)",
              flush=True)

    def _log_download_done(self) -> None:  # nothing was downloaded, and the line above said it all
        pass


def prepared(builder_class: type[LocalBuilder], **kwargs) -> LocalBuilder:
    """builder_class(**kwargs), its data built first where it is not yet. The builder is made again once the
    build's lock is held: made before another process finished the data, it would not know its splits."""
    target = os.fspath(builder_class(**kwargs).data_dir)  # <data_dir>/<name>/<config>/<version>
    with locks.building(target):
        _remove_incomplete(target)
        builder = builder_class(**kwargs)
        try:
            builder.download_and_prepare()
        except BaseException as error:
            _remove_incomplete(target)
            if (cause := atomic.disk_cause(error)) is not None:
                raise atomic.DiskError(atomic.disk_message(target, reason=cause[1])) from error
            raise
    return builder


def _remove_incomplete(target: str) -> None:
    """The folders TFDS builds in (`incomplete.<random>_<version>`, renamed to `<version>` once complete) that a
    build cut short left: under the lock no other build writes in them."""
    parent, version = os.path.split(target)
    for folder in glob.glob(os.path.join(glob.escape(parent), f"incomplete.*_{glob.escape(version)}")):
        shutil.rmtree(folder, ignore_errors=True)
