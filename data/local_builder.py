"""The base of the TFDS builders whose data this machine makes (SCAN from its grammar, the docstring corpus):
its log is one line of ours, where TFDS would announce "Downloading and preparing dataset Unknown size"
and draw progress bars, whose terminal escapes clutter a log file."""
import sys

import tensorflow_datasets as tfds


class LocalBuilder(tfds.core.GeneratorBasedBuilder, skip_registration=True):

    def download_and_prepare(self, **kwargs) -> None:
        tfds.display_progress_bar(sys.stderr.isatty())  # TFDS's bars go to stderr
        super().download_and_prepare(**kwargs)

    def _log_download_bytes(self) -> None:  # TFDS calls it once, when it starts to build
        print(f"building dataset {self.info.full_name} in {self.data_dir_root} (once; later runs read it)",
              flush=True)

    def _log_download_done(self) -> None:  # nothing was downloaded, and the line above said it all
        pass
