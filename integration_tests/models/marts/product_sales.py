"""Units and revenue per product: a Python model on the adapter's SparkSession, stored as a liquid
clustered Delta table (OPTIMIZE after each build clusters it by category)."""
import pyspark.sql.functions as F


def model(dbt, session):
    dbt.config(materialized="table", liquid_clustered_by=["category"])
    items = dbt.ref("stg_order_items")
    products = dbt.ref("dim_products").select("product_id", "category")
    return (items.join(products, "product_id")
            .groupBy("product_id", "category")
            .agg(F.sum("quantity").alias("units"), F.sum("line_amount").cast("decimal(18,2)").alias("revenue")))
