"""test_s3_destination.py's S3 cases, run as they are over the obstore prototype (issue #29):
an evaluation, not collected by pytest; run it by naming it::

    .venv/bin/python -m pytest tests/prototypes/obstore_s3.py -q -p no:cacheprovider

Only the fixtures change: ``dest`` and ``proxied`` are ObstoreDestinations on the same moto
bucket (through the same S3FaultProxy for ``proxied``). The SDK's attempts per call are the
same (``SDK_MAX_ATTEMPTS`` = 2 = the prototype's first try and one retry).
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.integration.test_s3_destination import (  # noqa: F401 - fixtures and cases used here
    bucket,
    proxy,
    test_a_failed_streamed_write_leaves_no_object_and_no_pending_upload,
    test_a_retry_after_header_becomes_backpressure,
    test_a_small_streamed_write_is_one_put,
    test_a_write_over_8_mib_is_a_multipart_upload_that_round_trips,
    test_create_exclusive_is_put_if_none_match_and_keeps_the_first_content,
    test_endpoint_url_addresses_buckets_in_the_path_as_minio_expects,
    test_list_pages_past_1000_keys_and_delete_batches_them,
    test_slow_down_is_retryable_and_the_sdk_tries_only_twice,
    test_throttling_and_server_errors_are_retried_by_the_retry_policy,
)
from tests.prototypes.obstore_destination import SDK_RETRIES, ObstoreDestination
from tests.services.moto import MotoServer
from tests.services.s3_faults import S3FaultProxy

pytestmark = pytest.mark.integration

assert SDK_RETRIES + 1 == 2  # S3Destination's SDK_MAX_ATTEMPTS, which the cases count on


@pytest.fixture
def dest(s3_server: MotoServer, bucket: str) -> Any:  # noqa: F811 - bucket: the fixture
    return ObstoreDestination.s3(bucket, "root/p", **s3_server.options())


@pytest.fixture
def proxied(s3_server: MotoServer, bucket: str, proxy: S3FaultProxy) -> Any:  # noqa: F811
    return ObstoreDestination.s3(
        bucket, "root/p", **{**s3_server.options(), "endpoint_url": proxy.url}
    )
