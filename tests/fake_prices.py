"""Loopback fakes of the price APIs the offers read without a node: the GCP Cloud Billing Catalog
(Compute Engine SKUs, two pages), Azure Retail Prices (`$filter` honoured for the VM size and for
spot-only queries, `NextPageLink` followed) and the AWS Price List Query API (`GetProducts`, JSON
1.1 as boto3 sends it), all on one `FakeApi`. moto serves EC2's spot price history, not the Price
List, hence this fake for AWS on-demand prices.

Prices are in the shape each API returns; `down` names APIs that answer 503 (a provider's price API
that cannot be reached).
"""

from __future__ import annotations

import json
import re
from typing import Any

from spoteval.apis.gcp_billing import COMPUTE_SERVICE
from tests.fake_api import FakeApi, Reply, Request

GCP_KEY = "catalog-key"


def gcp_sku(description: str, dollars: float, unit: str = "h", usage: str = "Preemptible") -> dict[str, Any]:
    units, nanos = int(dollars), round((dollars - int(dollars)) * 1e9)
    return {
        "skuId": re.sub(r"\W+", "-", description)[:20],
        "description": description,
        "category": {"resourceFamily": "Compute", "usageType": usage},
        "serviceRegions": ["us-central1"],
        "pricingInfo": [
            {
                "effectiveTime": "2026-11-01T00:00:00Z",
                "pricingExpression": {
                    "usageUnit": unit,
                    "tieredRates": [
                        {
                            "startUsageAmount": 0,
                            "unitPrice": {"currencyCode": "USD", "units": str(units), "nanos": nanos},
                        }
                    ],
                },
            }
        ],
    }


GCP_PAGES: list[list[dict[str, Any]]] = [
    [
        gcp_sku("Spot Preemptible G2 Instance Core running in Americas", 0.008),
        gcp_sku("G2 Instance Core running in Americas", 0.024988, usage="OnDemand"),
        gcp_sku("Spot Preemptible Nvidia L4 GPU running in Americas", 0.224),
    ],
    [
        gcp_sku("Spot Preemptible G2 Instance Ram running in Americas", 0.00094, unit="GiBy.h"),
        gcp_sku("G2 Instance Ram running in Americas", 0.002929, unit="GiBy.h", usage="OnDemand"),
        gcp_sku("Nvidia L4 GPU running in Americas", 0.56, usage="OnDemand"),
    ],
]


def azure_item(
    sku: str, meter: str, price: float, product: str = "Virtual Machines NCasT4_v3 Series"
) -> dict[str, Any]:
    return {
        "currencyCode": "USD",
        "retailPrice": price,
        "unitPrice": price,
        "armRegionName": "eastus",
        "armSkuName": sku,
        "meterName": meter,
        "productName": product,
        "serviceName": "Virtual Machines",
        "type": "Consumption",
        "unitOfMeasure": "1 Hour",
        "effectiveStartDate": "2026-10-01T00:00:00Z",
    }


AZURE_ITEMS: list[dict[str, Any]] = [
    azure_item("Standard_NC4as_T4_v3", "NC4as T4 v3", 0.526),
    azure_item("Standard_NC4as_T4_v3", "NC4as T4 v3 Spot", 0.1578),
    azure_item("Standard_NC4as_T4_v3", "NC4as T4 v3 Low Priority", 0.1052),
    azure_item("Standard_NC4as_T4_v3", "NC4as T4 v3", 0.736, "Virtual Machines NCasT4_v3 Series Windows"),
    azure_item("Standard_NC8as_T4_v3", "NC8as T4 v3", 0.752),
    azure_item("Standard_NC8as_T4_v3", "NC8as T4 v3 Spot", 0.2256),
]

#: (instance type, region code) -> hourly Linux on-demand price, as the Price List has it
AWS_ON_DEMAND: dict[tuple[str, str], float] = {
    ("g6.xlarge", "us-east-1"): 0.8048,
    ("g6.2xlarge", "us-east-1"): 0.9776,
    ("g5.xlarge", "us-east-1"): 1.006,
}


def aws_product(instance_type: str, region: str, price: float) -> str:
    sku = f"SKU{abs(hash((instance_type, region))) % 10**8}"
    return json.dumps(
        {
            "product": {
                "sku": sku,
                "productFamily": "Compute Instance",
                "attributes": {
                    "instanceType": instance_type,
                    "regionCode": region,
                    "operatingSystem": "Linux",
                },
            },
            "serviceCode": "AmazonEC2",
            "terms": {
                "OnDemand": {
                    f"{sku}.JRTCKXETXF": {
                        "effectiveDate": "2026-11-01T00:00:00Z",
                        "priceDimensions": {
                            f"{sku}.JRTCKXETXF.6YS6EN2CT7": {
                                "unit": "Hrs",
                                "description": f"${price} per On Demand Linux {instance_type} Instance Hour",
                                "pricePerUnit": {"USD": f"{price:.10f}"},
                            }
                        },
                    }
                }
            },
        }
    )


class PriceApis:
    """The three price APIs on one loopback server; `url` is its address."""

    def __init__(self) -> None:
        self.gcp_pages = [list(p) for p in GCP_PAGES]
        self.azure_items = list(AZURE_ITEMS)
        self.aws_on_demand = dict(AWS_ON_DEMAND)
        self.down: set[str] = set()
        self.api = FakeApi(self.handle)
        self.url = self.api.url

    def close(self) -> None:
        self.api.close()

    def handle(self, r: Request) -> Reply:
        if r.path == f"/v1/{COMPUTE_SERVICE}/skus":
            return self._gcp(r)
        if r.path == "/api/retail/prices":
            return self._azure(r)
        if r.method == "POST" and isinstance(r.body, dict) and r.body.get("ServiceCode"):
            return self._aws(r)
        return 404, {"error": f"no route {r.method} {r.path}"}, {}

    def _gcp(self, r: Request) -> Reply:
        if "gcp" in self.down:
            return 503, {"error": {"code": 503, "message": "The service is currently unavailable."}}, {}
        if r.query.get("key") != GCP_KEY:
            return 400, {"error": {"code": 400, "message": "API key not valid."}}, {}
        page = int(r.query.get("pageToken") or 0)
        answer: dict[str, Any] = {"skus": self.gcp_pages[page]}
        if page + 1 < len(self.gcp_pages):
            answer["nextPageToken"] = str(page + 1)
        return 200, answer, {}

    def _azure(self, r: Request) -> Reply:
        if "azure" in self.down:
            return 503, {"Error": "Service Unavailable"}, {}
        query = r.query.get("$filter", "")
        sku = re.search(r"armSkuName eq '([^']+)'", query)
        region = re.search(r"armRegionName eq '([^']+)'", query)
        items = [
            i
            for i in self.azure_items
            if (sku is None or i["armSkuName"] == sku[1])
            and (region is None or i["armRegionName"] == region[1])
        ]
        if "contains(meterName,'Spot')" in query:
            items = [i for i in items if "Spot" in i["meterName"]]
        skip = int(r.query.get("$skip") or 0)
        answer: dict[str, Any] = {
            "BillingCurrency": "USD",
            "Items": items[skip : skip + 2],
            "Count": len(items),
        }
        if skip + 2 < len(items):
            answer["NextPageLink"] = f"{self.url}/api/retail/prices?{_azure_next(r, skip + 2)}"
        return 200, answer, {}

    def _aws(self, r: Request) -> Reply:
        if "aws" in self.down:
            return 503, {"__type": "ServiceUnavailableException", "message": "unavailable"}, {}
        body = r.body if isinstance(r.body, dict) else {}
        terms = {f["Field"]: f["Value"] for f in body.get("Filters", [])}
        key = (terms.get("instanceType", ""), terms.get("regionCode", ""))
        linux = terms.get("operatingSystem") == "Linux" and terms.get("tenancy") == "Shared"
        price = self.aws_on_demand.get(key) if linux and body.get("ServiceCode") == "AmazonEC2" else None
        products = [aws_product(key[0], key[1], price)] if price is not None else []
        return 200, {"FormatVersion": "aws_v1", "PriceList": products}, {}


def _azure_next(r: Request, skip: int) -> str:
    from urllib.parse import quote, urlencode

    query = {k: v for k, v in r.query.items() if k != "$skip"}
    query["$skip"] = str(skip)
    return urlencode(query, quote_via=quote)
