//! Issue 13's bad-input suite: no panic, abort or silent wrong answer on any
//! input. Every case feeds one user mistake (or an edge case with a defined
//! answer) to the library and checks the typed error and that its message names
//! the culprit, or the defined value. Cases run under `catch_unwind`, so a panic
//! fails its case alone; one test per category (filterable, parallel) and
//! `all_categories_table` print the count table.

#[macro_use]
mod harness;

mod allocation;
mod autodiff;
mod axes;
mod constants_streams;
mod fixtures;
mod graph_building;
mod host_data;
mod indices;
mod session;
mod shapes;
mod text;

use harness::{run_and_report, Case, Category};

fn cases_of(category: Category) -> Vec<Case> {
    let all: Vec<Case> = match category {
        Category::Shapes => shapes::cases(),
        Category::Allocation => allocation::cases(),
        Category::HostData => host_data::cases(),
        Category::Indices => indices::cases(),
        Category::ConstantsStreams => constants_streams::cases(),
        Category::AxesReductions => axes::cases(),
        Category::Autodiff => autodiff::cases(),
        Category::GraphBuilding => graph_building::cases(),
        Category::Session => session::cases(),
        Category::Text => text::cases(),
    };
    assert!(all.iter().all(|c| c.category == category), "a case of {category:?} is filed under another category");
    all
}

#[test]
fn shapes_and_checked_arithmetic() {
    run_and_report(cases_of(Category::Shapes));
}

#[test]
fn allocation() {
    run_and_report(cases_of(Category::Allocation));
}

#[test]
fn host_data_and_bool_bytes() {
    run_and_report(cases_of(Category::HostData));
}

#[test]
fn index_semantics() {
    run_and_report(cases_of(Category::Indices));
}

#[test]
fn constants_in_place_and_streams() {
    run_and_report(cases_of(Category::ConstantsStreams));
}

#[test]
fn axes_and_reductions() {
    run_and_report(cases_of(Category::AxesReductions));
}

#[test]
fn autodiff_misuse() {
    run_and_report(cases_of(Category::Autodiff));
}

#[test]
fn graph_building() {
    run_and_report(cases_of(Category::GraphBuilding));
}

#[test]
fn session() {
    run_and_report(cases_of(Category::Session));
}

#[test]
fn text_and_loader() {
    run_and_report(cases_of(Category::Text));
}

/// Every category in one table (the summary issue 13 asks for).
#[test]
fn all_categories_table() {
    run_and_report(Category::ALL.into_iter().flat_map(cases_of).collect());
}
