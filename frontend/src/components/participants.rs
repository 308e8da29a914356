//! Who is here, their role, what they look at, who holds control; and the control buttons.

use leptos::prelude::*;
use tandem_protocol::live::{Role, WsClient};

use crate::live::Live;

fn role_name(r: Role) -> &'static str {
    match r {
        Role::Viewer => "viewer",
        Role::Driver => "driver",
        Role::Owner => "owner",
    }
}

#[component]
pub fn Participants(live: Live) -> impl IntoView {
    let s = live.state;
    let me = move || s.me.get().map(|m| m.id);
    let my_role = move || s.me.get().map(|m| m.role).unwrap_or(Role::Viewer);
    let (l1, l2, l3) = (live.clone(), live.clone(), live.clone());
    let hand_over = live.clone();
    view! {
        <section class="card participants" id="participants">
            <h2>"People"</h2>
            <ul>
                <For each=move || s.participants.get() key=|p| (p.id, p.looking_at.clone(), p.role) let:p>
                    {
                        let id = p.id;
                        let give = hand_over.clone();
                        view! {
                            <li class="participant" data-role=role_name(p.role)>
                                <span class="name">{p.name.clone()}</span>" "
                                <span class="badge">{role_name(p.role)}</span>
                                {move || (s.controller.get() == Some(id)).then(|| view! { <span class="badge badge-run control">"has control"</span> })}
                                {move || (me() == Some(id)).then(|| view! { <span class="muted">" (you)"</span> })}
                                {p.looking_at.clone().map(|l| view! { <span class="muted">" · "{l}</span> })}
                                {move || {
                                    let can_give = (s.controller.get() == me() && me().is_some()) || my_role() == Role::Owner;
                                    (can_give && me() != Some(id) && p.role != Role::Viewer).then(|| {
                                        let give = give.clone();
                                        view! { <button class="link" on:click=move |_| give.send(&WsClient::GrantControl { to: id })>"Hand over"</button> }
                                    })
                                }}
                            </li>
                        }
                    }
                </For>
            </ul>
            {move || {
                let n = s.audience.get();
                let you = s.me.get().is_some_and(|m| !s.participants.with(|ps| ps.iter().any(|p| p.id == m.id)));
                (n > 0).then(|| {
                    let others = n - u32::from(you);
                    let text = match (you, others) {
                        (true, 0) => "You are watching.".to_string(),
                        (true, 1) => "You and 1 more are watching.".to_string(),
                        (true, k) => format!("You and {k} more are watching."),
                        (false, 1) => "1 more is watching.".to_string(),
                        (false, k) => format!("{k} more are watching."),
                    };
                    view! { <p class="muted audience" id="audience">{text}</p> }
                })
            }}
            <div class="actions">
                {move || {
                    let role = my_role();
                    let holder = s.controller.get();
                    let mine = holder.is_some() && holder == me();
                    let (a, b, c) = (l1.clone(), l2.clone(), l3.clone());
                    view! {
                        {(role != Role::Viewer && !mine).then(|| view! { <button id="request-control" on:click=move |_| a.send(&WsClient::RequestControl)>"Request control"</button> })}
                        {mine.then(|| view! { <button id="release-control" on:click=move |_| b.send(&WsClient::ReleaseControl)>"Release control"</button> })}
                        {(role == Role::Owner && !mine).then(|| view! { <button id="take-control" on:click=move |_| c.send(&WsClient::TakeControl)>"Take control"</button> })}
                    }
                }}
            </div>
            {move || s.control_asked.get().map(|by| {
                let name = s.participants.with(|ps| ps.iter().find(|p| p.id == by).map(|p| p.name.clone())).unwrap_or_default();
                view! { <p class="notice">{name}" asks for control."</p> }
            })}
        </section>
    }
}
