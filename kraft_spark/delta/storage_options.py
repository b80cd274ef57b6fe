"""delta-rs's storage options for a warehouse URI, from the Hadoop settings a Spark user already
wrote for the same storage (``spark.hadoop.fs.s3a.access.key`` ...), so one configuration serves
Spark's readers and the driver's delta-rs commits.

Only what is set is mapped; delta-rs reads the rest from the driver's environment itself
(``AWS_*``, ``AZURE_*``, ``GOOGLE_*``: any of its storage options, by the same names), and an
environment value wins over nothing, a Hadoop value over the environment. HDFS needs nothing
here: delta-rs's HDFS client reads ``HADOOP_CONF_DIR`` as Hadoop does.

Which URIs delta-rs serves (``DELTA_RS_SCHEMES``) is the list the materializer checks before
taking a warehouse in process; any other scheme (``wasbs:``, ``oss:``, a custom Hadoop file
system) stays on Spark's Delta API.
"""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import urlparse

# Schemes delta-rs (the ``deltalake`` wheel: object_store's S3, GCS and Azure, hdfs-native)
# opens, as Hadoop names them and as delta-rs does.
S3_SCHEMES = frozenset({"s3", "s3a"})
GCS_SCHEMES = frozenset({"gs"})
AZURE_SCHEMES = frozenset({"abfs", "abfss", "az", "azure", "adl"})
HDFS_SCHEMES = frozenset({"hdfs", "viewfs"})
DELTA_RS_SCHEMES = S3_SCHEMES | GCS_SCHEMES | AZURE_SCHEMES | HDFS_SCHEMES

_HADOOP = "spark.hadoop."
_S3A = {
    "fs.s3a.access.key": "aws_access_key_id",
    "fs.s3a.secret.key": "aws_secret_access_key",
    "fs.s3a.session.token": "aws_session_token",
    "fs.s3a.endpoint.region": "aws_region",
}


def scheme_of(uri: str) -> str:
    return urlparse(uri).scheme.lower()


def served_by_delta_rs(uri: str) -> bool:
    return scheme_of(uri) in DELTA_RS_SCHEMES


def storage_options(uri: str, spark_conf: Mapping[str, str]) -> dict[str, str]:
    """delta-rs's storage options for the warehouse ``uri`` from the Spark configuration's
    Hadoop keys (``spark.hadoop.*``); empty when none apply."""
    hadoop = {k[len(_HADOOP):]: v for k, v in spark_conf.items() if k.startswith(_HADOOP)}
    parsed = urlparse(uri)
    scheme = parsed.scheme.lower()
    if scheme in S3_SCHEMES:
        return _s3(hadoop, parsed.hostname or "")
    if scheme in GCS_SCHEMES:
        keyfile = hadoop.get("google.cloud.auth.service.account.json.keyfile")
        return {"google_service_account": keyfile} if keyfile else {}
    if scheme in AZURE_SCHEMES:
        return _azure(hadoop, parsed.hostname or "")
    return {}


def _s3(hadoop: Mapping[str, str], bucket: str) -> dict[str, str]:
    # S3A's per-bucket keys (fs.s3a.bucket.<bucket>.<key>) override the global ones.
    prefix = f"fs.s3a.bucket.{bucket}."
    conf = dict(hadoop)
    conf.update({"fs.s3a." + k[len(prefix):]: v for k, v in hadoop.items()
                 if k.startswith(prefix)})
    options = {ours: conf[theirs] for theirs, ours in _S3A.items() if conf.get(theirs)}
    endpoint = conf.get("fs.s3a.endpoint", "").strip()
    if endpoint:
        if "://" not in endpoint:
            secure = conf.get("fs.s3a.connection.ssl.enabled", "true").strip().lower() != "false"
            endpoint = ("https://" if secure else "http://") + endpoint
        options["aws_endpoint_url"] = endpoint
        if endpoint.startswith("http://"):
            options["aws_allow_http"] = "true"
    path_style = conf.get("fs.s3a.path.style.access", "").strip().lower()
    if path_style in ("true", "false"):
        options["aws_virtual_hosted_style_request"] = "false" if path_style == "true" else "true"
    if path_style == "false" and "aws_endpoint_url" in options:
        # Virtual-hosted: delta-rs's S3 client takes the endpoint as the bucket's own host.
        scheme, _, host = options["aws_endpoint_url"].partition("://")
        options["aws_endpoint_url"] = f"{scheme}://{bucket}.{host}"
    return options


def _azure(hadoop: Mapping[str, str], host: str) -> dict[str, str]:
    # abfss://container@account.dfs.core.windows.net/path: the account's own keys first.
    account = host.split(".", 1)[0] if "." in host else ""
    options: dict[str, str] = {}
    if account:
        options["azure_storage_account_name"] = account
        key = hadoop.get(f"fs.azure.account.key.{host}")
        if key:
            options["azure_storage_account_key"] = key

    def oauth(name: str) -> str | None:
        return hadoop.get(f"fs.azure.account.oauth2.{name}.{host}") or hadoop.get(
            f"fs.azure.account.oauth2.{name}")

    client_id, secret, endpoint = (oauth("client.id"), oauth("client.secret"),
                                   oauth("client.endpoint"))
    if client_id and secret:
        options["azure_client_id"] = client_id
        options["azure_client_secret"] = secret
    if endpoint:  # https://login.microsoftonline.com/<tenant>/oauth2/token
        parts = urlparse(endpoint).path.strip("/").split("/")
        if parts and parts[0]:
            options["azure_tenant_id"] = parts[0]
    return options
